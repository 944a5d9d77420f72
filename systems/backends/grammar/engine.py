"""Run llama.cpp's own grammar engine on a text, without a model: does the grammar accept it?

Why: soundness and completeness of the compiler are claims about what llama.cpp will let a model write,
so the judge of "the grammar accepts this text" should be llama.cpp itself, not a re-implementation.
The grammar sampler (`llama_sampler_init_grammar`) needs only a vocabulary, so the SmolLM2 GGUF is
opened with `vocab_only`. The text is tokenized; before each token is accepted, the sampler is applied to
a one-candidate array holding that token, and a token the grammar forbids comes back with logit -inf. At
the end the end-of-generation token must be allowed (the grammar can stop there). A forbidden token is
never accepted: llama.cpp aborts the process on that.
"""

from __future__ import annotations

import atexit
import ctypes
import math
from functools import cached_property
from typing import Any


class GrammarEngine:
    """llama.cpp's grammar matcher over SmolLM2's vocabulary (see the module docstring)."""

    def __init__(self, model: str = "smollm2-135m-instruct"):
        self.model = model

    @cached_property
    def _llm(self) -> Any:
        import llama_cpp

        from systems.backends.llama_cpp import resolve_gguf

        llm = llama_cpp.Llama(model_path=str(resolve_gguf(self.model)), vocab_only=True, verbose=False)
        atexit.register(llm.close)  # before interpreter teardown, where llama.cpp's free hooks are gone
        return llm

    @cached_property
    def _vocab(self) -> Any:
        import llama_cpp

        return llama_cpp.llama_model_get_vocab(self._llm._model.model)

    def tokens(self, text: str) -> list[int] | None:
        """The text's tokens, or None where the vocabulary cannot spell it (e.g. some bytes of planes 3-16)."""
        data = text.encode("utf-8")
        toks = self._llm.tokenize(data, add_bos=False, special=False)
        return toks if self._llm.detokenize(toks) == data else None

    def parses(self, gbnf: str) -> bool:
        """llama.cpp's GBNF parser accepts the grammar (the sampler is NULL on a parse error)."""
        import llama_cpp

        sampler = llama_cpp.llama_sampler_init_grammar(self._vocab, gbnf.encode("utf-8"), b"root")
        if not sampler:
            return False
        llama_cpp.llama_sampler_free(sampler)
        return True

    def accepts(self, gbnf: str, texts: list[str]) -> list[bool | None]:
        """For each text: does the grammar accept it exactly (the whole text, then the end)?

        None for a text the vocabulary cannot spell (no model could write it, so there is nothing to judge).
        """
        import llama_cpp

        sampler = llama_cpp.llama_sampler_init_grammar(self._vocab, gbnf.encode("utf-8"), b"root")
        if not sampler:
            raise ValueError("llama.cpp could not parse the grammar")
        eos = self._llm.token_eos()
        data = (llama_cpp.llama_token_data * 1)()
        arr = llama_cpp.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)

        def allowed(tok: int) -> bool:
            data[0].id, data[0].logit, data[0].p = tok, 0.0, 0.0
            arr.size, arr.selected = 1, -1
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
            return not math.isinf(data[0].logit)

        out = []
        try:
            for text in texts:
                llama_cpp.llama_sampler_reset(sampler)
                toks = self.tokens(text)
                if toks is None:
                    out.append(None)
                    continue
                ok = True
                for tok in toks:
                    if not allowed(tok):
                        ok = False
                        break
                    llama_cpp.llama_sampler_accept(sampler, tok)
                out.append(ok and allowed(eos))
        finally:
            llama_cpp.llama_sampler_free(sampler)
        return out
