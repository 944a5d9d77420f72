"""Print one line of JSON: hashes of what this process's kernels compute, and which kernels they are.

`--probe train` (the default) trains the embedded DLM a few steps and hashes its weights; `--probe ops`
hashes four single operations (a linear layer, its weight-gradient GEMM, softmax, layer norm) on fixed
inputs, one thread: 20 seconds under emulation, where even the tiny model's training did not finish in
35 minutes (docs/reproducing.md).
benchmarks/kernels/portable.py runs it under emulated CPUs; tests/test_kernels.py under capped ISAs.

`python -m benchmarks.kernels.weights [--probe ops|train] [--steps 4] [--params JSON]`
"""

from __future__ import annotations

import argparse
import hashlib
import json

from bench import kernels  # the first import of bench pins the kernels when BENCH_PORTABLE_KERNELS=1


def tensors_hash(*tensors: object) -> str:
    """sha256 over the tensors, in order, as raw bytes (bit-exact equality)."""
    h = hashlib.sha256()
    for tensor in tensors:
        h.update(tensor.detach().contiguous().numpy().tobytes())  # type: ignore[attr-defined]
    return h.hexdigest()


def weights_hash(model: object) -> str:
    """`tensors_hash` over every tensor of the state dict, in order."""
    return tensors_hash(*model.state_dict().values())  # type: ignore[attr-defined]


def ops_hashes() -> dict[str, str]:
    """One linear layer's forward and weight gradient, softmax and layer norm on seeded inputs."""
    import torch

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    x, w, g = (torch.randn(*shape, generator=gen) for shape in ((512, 128), (384, 128), (512, 384)))
    y = torch.nn.functional.linear(x, w)
    return {
        "linear": tensors_hash(y),
        "weight_grad": tensors_hash(g.t() @ x),
        "softmax": tensors_hash(torch.softmax(y, -1)),
        "layer_norm": tensors_hash(torch.nn.functional.layer_norm(y, (384,))),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", choices=["train", "ops"], default="train")
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--params", default="{}", help="MDLMParams overrides, JSON")
    ap.add_argument(
        "--backward",
        choices=["deterministic", "usual"],
        default="deterministic",
        help="usual: train without the deterministic algorithms kernels.training() turns on (to measure them)",
    )
    args = ap.parse_args(argv)
    if args.probe == "ops":
        print(json.dumps({"ops": ops_hashes(), "kernels": kernels.identity()}), flush=True)
        return 0

    from bench.tasks import load_task
    from systems.backends.mdlm.backend import MDLMParams
    from systems.backends.mdlm.train import train_model

    if args.backward == "usual":
        import torch

        torch.use_deterministic_algorithms = lambda *_, **__: None  # training() cannot turn them on
    spec = load_task(args.task, n_references=64, n_holdout=32)
    params = MDLMParams(**({"train_steps": args.steps, "threads": args.threads} | json.loads(args.params)))
    model, _, seconds = train_model(spec, params.train_config(), 0)
    out = {"sha256": weights_hash(model), "kernels": kernels.identity(), "seconds": round(seconds, 1)}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
