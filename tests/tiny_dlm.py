"""The embedded DLM's smallest test configuration: trains in seconds, with small note and example pools
so the MiniLM set-up (conditioning.py) stays short. Quality bars use the default size
(tests/test_diffusion_quality.py)."""

TINY_DLM = {
    "d_model": 48,
    "n_layers": 2,
    "n_heads": 2,
    "d_ff": 96,
    "train_steps": 30,
    "batch_size": 8,
    "note_pool": 40,
    "example_pool": 8,
}
