"""The tests' name for the embedded DLM's smallest configuration (systems/backends/mdlm/tiny.py)."""

from systems.backends.mdlm.tiny import TINY_DLM

__all__ = ["TINY_DLM"]
