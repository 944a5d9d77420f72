"""Does the installed llama.cpp build run on this CPU? Exit 0 if it does, 1 if it crashed or failed.

    python -m systems.backends.llama_smoke

A native llama.cpp build (-march=native) segfaulted in `llama_decode` on a VM whose CPU reports AMX,
on every evaluation of two or more tokens (2026-12-02, llama-cpp-python 0.3.35 and 0.3.36), and a
wheel that pip's cache kept from an earlier build is reused as it is, whatever the CPU. A crash kills
the process, so the check runs in a child process and reads how it ended. `.ci/run` rebuilds the
bindings portably when this fails; the README says how to do it by hand.
"""

from __future__ import annotations

import subprocess
import sys

_CHILD = """
from llama_cpp import Llama
from systems.backends.llama_cpp import resolve_gguf
llm = Llama(model_path=str(resolve_gguf("smollm2-135m-instruct")), n_ctx=256, n_threads=1, verbose=False,
            logits_all=True, seed=0)
toks = llm.tokenize(b"The capital of France is Paris. The capital of Italy is")
llm.eval(toks)
out = llm.create_completion("Name one colour:", max_tokens=8, temperature=0.0)
assert out["choices"][0]["text"] is not None
print("llama.cpp runs:", len(toks), "tokens evaluated")
"""


def run_smoke(timeout_s: float = 300.0, code: str = _CHILD) -> tuple[bool, str]:
    """(ok, what happened): the child's exit, a signal that killed it, or its error's last line.

    `code` is the child's program (the SmolLM2 evaluation; tests pass one that crashes)."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout_s:g}s"
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    if proc.returncode < 0:
        return False, f"killed by signal {-proc.returncode} (a build this CPU cannot run)"
    tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return False, f"exited {proc.returncode}: {tail}"


def main() -> int:
    ok, what = run_smoke()
    print(("ok: " if ok else "FAILED: ") + what, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
