"""Benchmarks of the prompt-optimization loop (see false_acceptance.py, fallbacks.py)."""
