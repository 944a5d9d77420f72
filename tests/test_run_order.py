"""Cells run seed-major, so a run stopped part-way holds every system on the same seeds."""

from __future__ import annotations

import json

from tests.filesuite import run, two_system_suite


def test_cells_run_seed_by_seed_across_systems(tmp_path):
    suite = two_system_suite(tmp_path, seeds=3, samples=4, name="order")
    result = run(suite, tmp_path, out=str(tmp_path / "run"))
    cells = []
    for cell_json in (tmp_path / "run").glob("cells/*/*/seed-*/cell.json"):
        meta = json.loads(cell_json.read_text())
        cells.append((meta["started"], meta["key"]["seed"], meta["key"]["system"]))
    order = [(seed, system) for _, seed, system in sorted(cells)]
    assert not result.failed_cells
    assert order == [(s, name) for s in range(3) for name in ("first", "second")]
