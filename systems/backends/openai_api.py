"""OpenAI-compatible chat backend (OpenAI, vLLM, llama.cpp's server, Ollama) over the `openai` client.

Why the retry loop is ours and not the client's: the harness must tell a model failure from a harness
failure, so every attempt is classified here (429 / 5xx / timeout / connection reset / malformed body are
retried with exponential backoff and jitter; 4xx other than 408/409/429 fail at once) and the final error
names the model, the attempts and the last cause. The body is parsed by us, so a 200 with a truncated or
non-JSON body counts as a transient fault instead of surfacing as an obscure attribute error.

Secrets: the API key is read from the environment variable named by the spec (`api_key_env`, default
`OPENAI_API_KEY`) when a call is made, held only by the short-lived client, and appears in no field,
repr, identity, cache key or error message. A local server (any `base_url`) accepts a placeholder key.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.deadline import DEADLINE_ERROR
from bench.deadline import remaining as deadline_left
from bench.errors import BackendUnavailable, BenchError
from bench.types import JSON, Completion, GenerationRequest

OPENAI_DIALECT = "openai"
# Extra sampling knobs each server understands beyond the OpenAI API (sent in the request body).
DIALECT_KNOBS: dict[str, dict[str, str]] = {
    "openai": {},
    "vllm": {"top_k": "top_k", "repeat_penalty": "repetition_penalty"},
    "llama_cpp": {"top_k": "top_k", "repeat_penalty": "repeat_penalty"},
    "ollama": {},
}
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})


class BackendCallError(RuntimeError):
    """A call failed after its retry budget (or for a reason retrying cannot fix). A harness failure."""


class MalformedResponse(Exception):
    """HTTP 200 whose body is not a chat completion."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens (the catalog's `prices` table)."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input_per_mtok + tokens_out * self.output_per_mtok) / 1_000_000


def lookup_price(spec: JSON) -> Price | None:
    """A preset's own `price`, else the catalog's `prices[model]`; None when unknown."""
    raw = spec.get("price")
    if raw is None:
        from bench.profiles import load_catalog

        raw = load_catalog().prices.get(str(spec.get("model")))
    if raw is None:
        return None
    return Price(float(raw["input_per_mtok"]), float(raw["output_per_mtok"]))


@dataclass
class OpenAIBackend:
    """TextBackend for any server speaking the OpenAI chat-completions API."""

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    dialect: str = OPENAI_DIALECT
    concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 5
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    price: Price | None = None
    weights: str | None = None  # what the server runs, when its model name alone does not say
    send_seed: bool = True
    max_tokens_field: str = "max_tokens"
    _jitter: random.Random = field(default_factory=random.Random, repr=False)

    @classmethod
    def from_spec(cls, spec: JSON, env: Any = None) -> OpenAIBackend:
        params = dict(spec.get("params") or {})
        model = spec.get("model")
        if not model:
            raise BackendUnavailable("openai model spec needs 'model' (the server's model id)")
        base_url = params.get("base_url")
        dialect = params.get("dialect") or (OPENAI_DIALECT if base_url is None else "llama_cpp")
        if dialect not in DIALECT_KNOBS:
            raise BenchError(f"unknown openai dialect {dialect!r}; one of {', '.join(DIALECT_KNOBS)}")
        return cls(
            model=str(model),
            base_url=base_url,
            api_key_env=str(params.get("api_key_env", "OPENAI_API_KEY")),
            dialect=dialect,
            concurrency=int(params.get("concurrency", 8)),
            timeout_s=float(params.get("timeout_s", 60.0)),
            max_retries=int(params.get("max_retries", 5)),
            backoff_base_s=float(params.get("backoff_base_s", 0.5)),
            backoff_max_s=float(params.get("backoff_max_s", 30.0)),
            price=lookup_price(spec),
            weights=spec.get("weights"),
            send_seed=bool(params.get("send_seed", True)),
            max_tokens_field=str(params.get("max_tokens_field", "max_tokens")),
        )

    def identity(self) -> JSON:
        """Model id (and weights when given). Never the key, base URL, timeouts or concurrency."""
        ident: JSON = {"backend": "openai", "model": self.model}
        if self.weights:
            ident["weights"] = self.weights
        return ident

    # ------------------------------------------------------------------------------- requests
    def request_body(self, req: GenerationRequest) -> tuple[JSON, JSON]:
        """(standard arguments, extra body) of one request; unsupported knobs raise, never vanish."""
        p = req.params
        args: JSON = {
            "model": self.model,
            "messages": [{"role": r, "content": c} for r, c in req.messages],
            "temperature": p.temperature,
            "top_p": p.top_p,
            self.max_tokens_field: p.max_tokens,
        }
        if self.send_seed:
            # one distinct, reproducible seed per (run seed, sample index)
            args["seed"] = (req.seed * 1_000_003 + req.sample_index) % (2**31 - 1)
        if p.stop:
            args["stop"] = list(p.stop)
        extra: JSON = {}
        if p.json_schema is not None:
            self._constrain(p.json_schema, args, extra)
        knobs = DIALECT_KNOBS[self.dialect]
        for knob, active in (("top_k", p.top_k > 0), ("repeat_penalty", p.repeat_penalty != 1.0)):
            if not active:
                continue
            if knob not in knobs:
                raise BenchError(
                    f"{knob}={getattr(p, knob)} is not part of the {self.dialect!r} API (model {self.model}); "
                    "set the spec's params.dialect to vllm or llama_cpp, or drop the setting"
                )
            extra[knobs[knob]] = getattr(p, knob)
        if p.num_beams > 1:
            raise BenchError(f"beam search (num_beams={p.num_beams}) is not available through the OpenAI API")
        extra.update(dict(p.extra))
        return args, extra

    def _constrain(self, schema: JSON, args: JSON, extra: JSON) -> None:
        """Grammar-constrained decoding in each server's own terms.

        llama.cpp servers take a GBNF `grammar` (ours: exact and fast; their `json_object` + `schema`
        route when our converter declines the schema); OpenAI, vLLM and Ollama take `json_schema`.
        """
        if self.dialect == "llama_cpp":
            from systems.backends.grammar import UnsupportedSchema, schema_to_gbnf

            try:
                extra["grammar"] = schema_to_gbnf(schema)
                return
            except UnsupportedSchema:
                args["response_format"] = {"type": "json_object", "schema": schema}
                return
        from systems.backends.grammar import without_local_annotations

        plain = without_local_annotations(schema)  # x-grammar / x-maxBytes stay local
        args["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "record", "schema": plain, "strict": False},
        }

    def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        """Run all requests with bounded concurrency; raise BackendCallError if any fails for good."""
        if not requests:
            return []
        bodies = [self.request_body(r) for r in requests]  # argument errors surface before any call
        return _run_coroutine(self._generate_all(bodies))

    def _api_key(self) -> str:
        key = os.environ.get(self.api_key_env)
        if key:
            return key
        if self.base_url is None:
            raise BackendUnavailable(
                f"model {self.model} needs an API key in the environment variable {self.api_key_env}"
            )
        return "local-server-accepts-any-key"

    async def _generate_all(self, bodies: list[tuple[JSON, JSON]]) -> list[Completion]:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(
            api_key=self._api_key(), base_url=self.base_url, max_retries=0, timeout=self.timeout_s
        )
        sem = asyncio.Semaphore(max(1, self.concurrency))
        try:
            tasks = [asyncio.ensure_future(self._call(client, sem, args, extra)) for args, extra in bodies]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = [t for t in done if t.exception() is not None]
            if failed:
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                raise failed[0].exception()  # type: ignore[misc]
            return [t.result() for t in tasks]
        finally:
            await client.close()

    async def _call(self, client: Any, sem: asyncio.Semaphore, args: JSON, extra: JSON) -> Completion:
        import openai

        t0 = time.perf_counter()
        attempts = 0
        last = ""
        async with sem:
            while True:
                attempts += 1
                retry_after: float | None = None
                left = deadline_left()  # the agent loop's per-item deadline caps the request (bench.deadline)
                if left is not None and left <= 0:
                    return Completion(
                        text="", finish_reason="error", error=DEADLINE_ERROR, seconds=time.perf_counter() - t0
                    )
                timeout = self.timeout_s if left is None else min(self.timeout_s, left)
                try:
                    raw = await client.chat.completions.with_raw_response.create(
                        **args, extra_body=extra or None, timeout=timeout
                    )
                    return self._completion(raw.http_response.text, time.perf_counter() - t0)
                except MalformedResponse as exc:
                    last = f"malformed response body ({exc})"
                except openai.APITimeoutError:
                    if timeout < self.timeout_s:
                        continue  # the deadline, not the server: the check above ends the call
                    last = f"timed out after {self.timeout_s:g}s"
                except openai.APIConnectionError as exc:
                    last = f"connection error ({type(exc.__cause__ or exc).__name__})"
                except openai.APIStatusError as exc:
                    if exc.status_code in (401, 403):  # the server's text may quote part of the key
                        last = (
                            f"HTTP {exc.status_code}: not authorized (check the key in ${self.api_key_env})"
                        )
                    else:
                        last = f"HTTP {exc.status_code}: {_short(exc.message)}"
                    if exc.status_code not in RETRY_STATUS:
                        raise BackendCallError(
                            f"openai backend, model {self.model}: {last} (not retried)"
                        ) from None
                    retry_after = _retry_after(exc.response.headers)
                if attempts > self.max_retries:
                    raise BackendCallError(
                        f"openai backend, model {self.model}: gave up after {attempts} attempts; last error: {last}"
                    )
                await asyncio.sleep(self.backoff(attempts, retry_after))

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Exponential backoff with full jitter in [d/2, d], at least the server's Retry-After."""
        d = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        wait = d * (0.5 + 0.5 * self._jitter.random())
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.backoff_max_s))
        return wait

    def _completion(self, body: str, seconds: float) -> Completion:
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, TypeError) as exc:
            raise MalformedResponse(f"not JSON: {_short(str(body))!r}") from exc
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            if not isinstance(text, str):
                raise TypeError("content is not a string")
            usage = data.get("usage") or {}
            tokens_in = int(usage.get("prompt_tokens") or 0)
            tokens_out = int(usage.get("completion_tokens") or 0)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise MalformedResponse(f"no chat completion in body: {_short(json.dumps(data))!r}") from exc
        cost = self.price.cost(tokens_in, tokens_out) if self.price else 0.0
        return Completion(
            text=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            finish_reason=choice.get("finish_reason"),
            seconds=seconds,
            cost_usd=cost,
        )


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _retry_after(headers: Any) -> float | None:
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name) if headers is not None else None
        if value:
            try:
                return float(value) / scale
            except ValueError:
                return None
    return None


def _run_coroutine(coro: Any) -> Any:
    """asyncio.run, also from code already inside an event loop (then in a helper thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def runner() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    context = contextvars.copy_context()  # the caller's deadline (bench.deadline) holds in the thread too
    t = threading.Thread(target=context.run, args=(runner,), name="openai-backend")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
