"""Portable kernels (bench/kernels.py): one set of weights whatever ISA the libraries could use, keys
that say which kernels trained a model, and a clear error when they were asked for and do not run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import kernels
from bench.errors import BenchError
from benchmarks.kernels.loaded import result, start
from benchmarks.kernels.portable import clean_env
from tests.filesuite import run, two_system_suite
from tests.tiny_dlm import TINY_DLM

ROOT = Path(__file__).resolve().parent.parent
CAPPED_AT_AVX2 = {  # what a CPU without AVX-512 (AMD Zen 2/3, older Xeons) makes each library choose
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR",
}


def _has_avx512() -> bool:
    return bool(kernels.cpu_model().get("avx512f"))


def _has_avx2() -> bool:
    return bool(kernels.cpu_model().get("avx2"))


def _train(extra_env: dict[str, str]) -> dict:
    """Train the tiny DLM a few steps in a fresh process with `extra_env`; its weights hash and kernels.

    One torch thread: what is compared here is the ISA the libraries may use, and nothing else (two
    threads on a loaded machine are `test_two_thread_trainings_give_the_same_weights_on_a_loaded_
    machine`'s)."""
    return result(start(extra_env, threads=1))


@pytest.mark.slow
def test_portable_kernels_train_the_same_weights_whatever_isa_the_cpu_offers():
    """The machine's own kernels against the kernels an AVX2-only CPU would get: other weights on a
    CPU with AVX-512 (the reason for the pins); with BENCH_PORTABLE_KERNELS=1 the same bits on both."""
    native, capped = _train({}), _train(CAPPED_AT_AVX2)
    if _has_avx512():
        assert native["kernels"]["aten"] == "AVX512" and capped["kernels"]["aten"] == "AVX2"
        assert native["sha256"] != capped["sha256"]
    on = {kernels.SWITCH: "1"}
    # on a real AVX2-only CPU the portable pin lowers numpy to its baseline; a preset cap would win over it
    hardware_caps = {k: v for k, v in CAPPED_AT_AVX2.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    portable_native, portable_capped = _train(on), _train(on | hardware_caps)
    assert portable_native["kernels"]["aten"] == "AVX2"
    assert portable_native["kernels"]["MKL_CBWR"] == "COMPATIBLE"
    assert portable_native["sha256"] == portable_capped["sha256"]
    assert portable_native["sha256"] != native["sha256"]  # other kernels, other (but fixed) weights


@pytest.mark.slow
@pytest.mark.parametrize("portable", [False, True], ids=["own kernels", "portable kernels"])
def test_two_thread_trainings_give_the_same_weights_on_a_loaded_machine(portable):
    """Three 2-thread trainings at once on this box (each beside two others). Without the deterministic
    algorithms `kernels.training()` turns on, torch's CPU backward of indexing summed in an order set
    by thread timing: 12 such trainings gave 6 distinct weight hashes (docs/reproducing.md)."""
    if portable and not _has_avx2():
        pytest.skip("no AVX2: nothing is portable here")
    env = {kernels.SWITCH: "1"} if portable else {}
    procs = [start(env, threads=2) for _ in range(3)]
    hashes = {result(p)["sha256"] for p in procs}
    assert len(hashes) == 1, hashes


def test_training_runs_deterministic_algorithms_and_restores_torch():
    """`kernels.training()` sets the threads and torch's deterministic algorithms, and restores both,
    also when the training raises."""
    import torch

    before = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    with kernels.training(1):
        assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == before
    with pytest.raises(RuntimeError, match="inside"):
        with kernels.training(None):
            assert torch.get_num_threads() == before[0] and torch.are_deterministic_algorithms_enabled()
            raise RuntimeError("inside")
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == before


@pytest.mark.slow
def test_the_deterministic_backward_keeps_a_one_thread_model_bit_for_bit():
    """Why a 1-thread model keeps its key: with one thread the deterministic algorithms sum in the order
    the usual path does (the default-size model after 60 steps had the same hash both ways, measured;
    here the tiny model), so every cached 1-thread model is still the model its key names."""
    import torch

    from bench.tasks import load_task
    from benchmarks.kernels.weights import weights_hash
    from systems.backends.mdlm.backend import MDLMParams
    from systems.backends.mdlm.train import _train

    spec = load_task("multiwoz/train", n_references=64, n_holdout=32)
    cfg = MDLMParams(**TINY_DLM | {"train_steps": 6, "vocab_size": 400, "threads": 1}).train_config()
    hashes = []
    old = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        for deterministic in (False, True):
            torch.set_num_threads(1)
            torch.use_deterministic_algorithms(deterministic)
            hashes.append(weights_hash(_train(spec, cfg, 0, None, 0.0)[0]))
    finally:
        torch.set_num_threads(old[0])
        torch.use_deterministic_algorithms(old[1])
    assert hashes[0] == hashes[1]


def test_only_portable_kernels_and_more_threads_enter_a_cache_key(monkeypatch):
    """Off (the default) and on one thread, keys are what they were before portable kernels and the
    deterministic backward existed; portable kernels and a multi-thread training say so."""
    from systems.backends.difflm.train import DiffLMTrainConfig
    from systems.backends.mdlm.backend import MDLMParams, train_key

    monkeypatch.delenv(kernels.SWITCH, raising=False)
    assert kernels.key_part() == {} and kernels.key_part(None) == {}
    one, two = MDLMParams(**TINY_DLM).train_config(), MDLMParams(**TINY_DLM | {"threads": 2}).train_config()
    assert "kernels" not in train_key(one) and "backward" not in train_key(one)
    assert train_key(two)["backward"] == kernels.DETERMINISTIC_BACKWARD and "kernels" not in train_key(two)
    assert "kernels" not in DiffLMTrainConfig().key() and "backward" not in DiffLMTrainConfig().key()
    assert DiffLMTrainConfig(threads=2).key()["backward"] == kernels.DETERMINISTIC_BACKWARD
    monkeypatch.setattr(kernels, "portable", lambda: True)  # as in a process that started pinned
    monkeypatch.setenv(kernels.SWITCH, "1")
    assert train_key(one)["kernels"] == kernels.PORTABLE_VERSION and "backward" not in train_key(one)
    assert train_key(two)["backward"] == kernels.DETERMINISTIC_BACKWARD
    assert DiffLMTrainConfig().key()["kernels"] == kernels.PORTABLE_VERSION


def test_asking_for_portable_kernels_after_torch_chose_its_own_is_a_clear_error(monkeypatch):
    """This test process loaded torch with the machine's kernels; setting the switch now cannot change
    them, so a model trained here must not be keyed portable."""
    import torch

    if torch.backends.cpu.get_cpu_capability() == "AVX2" and os.environ.get("MKL_CBWR") == "COMPATIBLE":
        pytest.skip("this process already runs the portable kernels")
    monkeypatch.setenv(kernels.SWITCH, "1")
    with pytest.raises(BenchError, match="BENCH_PORTABLE_KERNELS=1 but this process runs other kernels"):
        kernels.key_part()


def test_numpy_loaded_before_bench_is_caught_too():
    """numpy reads its feature switch when it loads: loaded first, it keeps its wider kernels (whose
    sort orders ties its own way), and the process is not portable even though torch is."""
    if not _has_avx2():
        pytest.skip("no AVX2: nothing is portable here")
    script = (
        "import numpy\nfrom bench import kernels\nimport torch\n"
        "try:\n    kernels.key_part()\nexcept Exception as exc:\n    print(exc)\n"
    )
    env = clean_env() | {kernels.SWITCH: "1"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert "numpy dispatches above its baseline" in out.stdout, out.stdout + out.stderr


def test_a_run_records_its_cpu_and_kernels(tmp_path):
    suite, out = two_system_suite(tmp_path, seeds=1, samples=2, name="kernels"), tmp_path / "run"
    run(suite, tmp_path, None, out=str(out))
    recorded = json.loads((out / "manifest.json").read_text())["host"]["kernels"]
    assert recorded["cpu"] == kernels.cpu_model() and recorded["cpu"]["model"]
    assert set(recorded["settings"]) == set(kernels.PORTABLE_ENV)
    assert recorded["portable"] is kernels.wanted()


def test_pin_sets_what_is_unset_and_keeps_a_users_own_setting(monkeypatch):
    for name in kernels.PORTABLE_ENV:  # set, then delete: monkeypatch then removes what pin() adds
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    monkeypatch.delenv(kernels.SWITCH, raising=False)
    kernels.pin()
    assert "ATEN_CPU_CAPABILITY" not in os.environ  # off: nothing set
    monkeypatch.setenv(kernels.SWITCH, "1")
    kernels.pin()
    assert os.environ["ATEN_CPU_CAPABILITY"] == "avx2" and os.environ["MKL_CBWR"] == "AUTO"


def test_a_trained_model_records_the_kernels_that_trained_it(tmp_path):
    from types import SimpleNamespace

    import torch

    from bench.tasks import load_task
    from systems.backends.mdlm.backend import EmbeddedMDLMBackend

    spec = load_task("multiwoz/train", n_references=16, n_holdout=8)
    env = SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    EmbeddedMDLMBackend.from_spec({"params": TINY_DLM | {"vocab_size": 400, "train_steps": 2}}, env)
    (meta,) = tmp_path.glob("mdlm/*/meta.json")
    recorded = json.loads(meta.read_text())["kernels"]
    assert recorded["aten"] == torch.backends.cpu.get_cpu_capability()
    assert set(recorded) == {"aten", *(k for k in kernels.PORTABLE_ENV if k != "ATEN_CPU_CAPABILITY")}
