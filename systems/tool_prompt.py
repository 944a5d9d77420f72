"""The diffusion systems' prompt for one tool-call item (BFCL single-turn): the request and the functions.

Why a prompt of its own: the AR prompt (the item's instruction) is a paragraph of format rules, every
function's description and the conversation, thousands of characters; the embedded DLM reads a short
window of prompt tokens (`max_prompt_tokens`, kept from the end). So the DLM sees the request and one
compact signature per function, `name(arg, opt?)`, the names and argument keys it must write (its copy head
can copy them), the functions last, so a cut from the left drops the start of the request first. The embedded DLM is
trained on exactly this prompt for the reference items (question -> canonical answer) and sampled with it
for the scored items (systems/backends/mdlm/train.py, systems/llada.py).
"""

from __future__ import annotations

from typing import Any

from bench.types import JSON

TOOL_INSTRUCTION = "Answer the request with calls to these functions."
"""Line 1 of every tool-call prompt: the embedded DLM reads line 1 as the instruction, as a sentence
vector only (systems/backends/mdlm/conditioning.py); the request and functions follow as tokens."""


def request_text(question: Any) -> str:
    """The user's messages of a BFCL question (turns of `{"role", "content"}`), joined."""
    turns = [m for turn in question for m in turn] if isinstance(question, list) else []
    return " ".join(
        str(m.get("content", "")) for m in turns if isinstance(m, dict) and m.get("role") != "system"
    )


def signature(fn: JSON) -> str:
    """`name(required, optional?)`: what a call to `fn` may name."""
    params = fn.get("parameters") or {}
    required = set(params.get("required") or [])
    args = [k if k in required else f"{k}?" for k in (params.get("properties") or {})]
    return f"{fn.get('name')}({', '.join(args)})"


def item_prompt(meta: JSON) -> str:
    """The DLM prompt of one single-turn tool-call item (its meta: `question`, `functions`)."""
    functions = meta.get("functions") or []
    lines = [TOOL_INSTRUCTION, "Request: " + request_text(meta.get("question"))]
    lines.append("Functions: " + ("; ".join(signature(f) for f in functions) if functions else "none"))
    return "\n".join(lines)


def is_tool_item(meta: JSON) -> bool:
    """A single-turn tool-call item (the DLM prompt above applies)."""
    return "functions" in meta and "question" in meta and not meta.get("multi_turn")
