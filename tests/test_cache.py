"""The call-cache key covers everything that changes an output and nothing that cannot."""

from dataclasses import replace

from bench.cache import CachedBackend, CallCache, call_key
from bench.types import Completion, GenerationRequest, SamplingParams

IDENT = {"backend": "x", "model": "m"}
REQ = GenerationRequest.chat("hello", SamplingParams(temperature=0.7), seed=1, sample_index=0)


def test_key_changes_with_every_output_relevant_field():
    base = call_key(IDENT, REQ)
    variants = [
        call_key({**IDENT, "model": "m2"}, REQ),
        call_key(IDENT, replace(REQ, seed=2)),
        call_key(IDENT, replace(REQ, sample_index=1)),
        call_key(IDENT, replace(REQ, params=SamplingParams(temperature=0.2))),
        call_key(IDENT, replace(REQ, params=SamplingParams(top_p=0.9))),
        call_key(IDENT, replace(REQ, params=SamplingParams(json_schema={"type": "object"}))),
        call_key(IDENT, GenerationRequest.chat("hello!", SamplingParams(temperature=0.7), 1, 0)),
        call_key(IDENT, GenerationRequest.chat("hello", SamplingParams(temperature=0.7), 1, 0, system="s")),
    ]
    assert len({base, *variants}) == len(variants) + 1
    assert call_key(dict(reversed(list(IDENT.items()))), REQ) == base  # order-insensitive identity


class CountingBackend:
    """A real (trivial) backend: echoes the prompt; counts calls so cache hits are observable."""

    def __init__(self):
        self.calls = 0

    def identity(self):
        return IDENT

    def generate(self, requests):
        self.calls += len(requests)
        return [
            Completion(
                text=r.messages[-1][1][::-1] + str(r.seed),
                error="boom" if "fail" in r.messages[-1][1] else None,
            )
            for r in requests
        ]


def test_cached_backend_hits_and_never_caches_errors(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    b = CountingBackend()
    cb = CachedBackend(b, cache)
    first = cb.generate([REQ, replace(REQ, seed=5)])
    again = cb.generate([REQ, replace(REQ, seed=5)])
    assert b.calls == 2 and [c.text for c in again] == [c.text for c in first]
    assert all(c.cached for c in again) and cache.hits == 2 and cache.misses == 2
    bad = GenerationRequest.chat("fail", SamplingParams(), 0, 0)
    cb.generate([bad])
    cb.generate([bad])
    assert b.calls == 4  # the failed call was retried, not served from cache
    # a second process-level handle on the same file sees the entries (WAL, shared)
    assert len(CallCache(tmp_path / "c.sqlite")) == 2
