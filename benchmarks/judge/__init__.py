"""Benchmarks of the judge cluster (see calibration.py)."""
