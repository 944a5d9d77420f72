"""The embedded DLM's smallest configuration (MDLMParams overrides): trains in seconds, with small note
and example pools so the MiniLM set-up (conditioning.py) stays short. The tests train it
(tests/tiny_dlm.py) and so do the kernel benchmarks (benchmarks/kernels/loaded.py), which is why it
lives in the package; quality bars use the default size (tests/test_diffusion_quality.py)."""

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
