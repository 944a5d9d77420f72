"""Benchmarks of the diffusion decoding paths (see decoding.py)."""
