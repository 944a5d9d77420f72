"""`bench score` (score saved generations) and `bench rescore` (re-score a whole run from its samples).

Neither command generates anything. Model-free metrics need no model at all; `similarity`, `bleu`,
`rouge_l`, `meteor` and `perplexity` load the profile's embedder / scorer (embedded profile: MiniLM and
SmolLM2, both from installed packages), and only when one of them is requested.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from bench.errors import BenchError

METRICS_HELP = "comma-separated metric names (default: every default metric; see `bench list metrics`)"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "score",
        help="score saved generations (JSONL of {'text': ...} or {'record': {...}}) without generating",
        description="Score saved generations against a task (or an explicit schema + references).",
    )
    p.add_argument("samples", help="JSONL file: one {'text': raw output} or {'record': {...}} per line")
    p.add_argument("--task", help="task name (e.g. multiwoz/hotel, truthfulqa); loads schema and split")
    p.add_argument(
        "--seed", "--split-seed", dest="split_seed", type=int, default=0, help="task split seed (default 0)"
    )
    p.add_argument("--n-references", type=int, default=None, help="references in the task split")
    p.add_argument("--n-holdout", type=int, default=None, help="holdout records in the task split")
    p.add_argument("--data-dir", default=None, help="dataset directory (default $BENCH_DATA_DIR)")
    p.add_argument("--schema", help="JSON Schema file (instead of --task)")
    p.add_argument("--references", help="JSONL of reference records (with --schema)")
    p.add_argument("--holdout", help="JSONL of holdout records (with --schema; default: the references)")
    p.add_argument("--metrics", default=None, help=METRICS_HELP)
    p.add_argument("--profile", default="embedded", help="profile whose embedder/scorer serve model metrics")
    p.add_argument("--per-sample", action="store_true", help="also print every sample's status and errors")
    p.add_argument("--json", action="store_true", help="print one JSON object {metric: value} (NaN as null)")
    p.set_defaults(func=run_score)

    r = subparsers.add_parser(
        "rescore",
        help="recompute every cell's metrics of a run from its stored samples (no generation)",
        description="Re-score every finished cell of RUN_DIR with the run's metric list and task config.",
    )
    r.add_argument("run_dir")
    r.add_argument("--metrics", default=None, help="override the run's metric list (" + METRICS_HELP + ")")
    r.add_argument(
        "--data-dir", default=None, help="dataset directory (default: the run's, else $BENCH_DATA_DIR)"
    )
    r.add_argument("--json", action="store_true", help="print {cell label: {metric: value}}")
    r.set_defaults(func=run_rescore)


# ----------------------------------------------------------------------------------- helpers
def parse_metric_list(text: str | None) -> list[str]:
    """Metric names from a comma list, validated against the registry (close matches suggested)."""
    from bench.registry import METRICS, UnknownNameError
    from metrics.registry import DEFAULT_METRICS

    if not text:
        return list(DEFAULT_METRICS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names:
        try:
            METRICS.get(n)
        except UnknownNameError as exc:
            raise BenchError(str(exc)) from None
    return names


def _read_jsonl(path: str | Path, what: str) -> list[Any]:
    p = Path(path)
    if not p.is_file():
        raise BenchError(f"{what} file not found: {p}")
    rows = []
    with p.open(encoding="utf-8", errors="surrogateescape") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BenchError(f"{p}:{lineno}: not a JSON line ({exc.msg})") from None
    return rows


def samples_from_lines(rows: list[Any], source: str = "samples") -> list[Any]:
    """{"text": ...} (raw output, optionally a stored Sample) or {"record": {...}} -> Samples."""
    from bench.types import Sample

    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or ("text" not in row and "record" not in row):
            raise BenchError(f"{source} line {i + 1}: expected an object with 'text' or 'record'")
        if "text" in row:
            sample = Sample.from_json({**row, "index": row.get("index", i)})
            if not isinstance(sample.text, str):
                sample.text = json.dumps(sample.text)
        else:
            # A pre-parsed record goes through the same strict extraction as raw text (NaN stays invalid).
            sample = Sample(
                index=int(row.get("index", i)), text=json.dumps(row["record"], ensure_ascii=False)
            )
        out.append(sample)
    return out


def _explicit_task(args: argparse.Namespace) -> Any:
    from bench.types import TaskSpec

    try:
        schema = json.loads(Path(args.schema).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchError(f"cannot read schema {args.schema}: {exc}") from None
    if not isinstance(schema, dict):
        raise BenchError(f"schema {args.schema} is not a JSON object")
    refs = _records(args.references, "references") if args.references else []
    holdout = _records(args.holdout, "holdout") if args.holdout else refs
    return TaskSpec(
        name=Path(args.schema).stem,
        instruction="",
        schema=schema,
        references=tuple(refs),
        holdout=tuple(holdout),
    )


def _records(path: str, what: str) -> list[dict]:
    rows = _read_jsonl(path, what)
    out = []
    for i, r in enumerate(rows):
        rec = r.get("record", r) if isinstance(r, dict) else r
        if not isinstance(rec, dict):
            raise BenchError(f"{what} line {i + 1}: a record must be a JSON object")
        out.append(rec)
    return out


def load_spec(args: argparse.Namespace) -> Any:
    if bool(args.task) == bool(args.schema):
        raise BenchError("give exactly one of --task NAME or --schema S.json (with --references R.jsonl)")
    if args.schema:
        return _explicit_task(args)
    from bench.tasks import load_task

    return load_task(
        args.task,
        n_references=args.n_references,
        n_holdout=args.n_holdout,
        split_seed=args.split_seed,
        data_dir=args.data_dir,
    )


def metric_resources(profile: str = "embedded", roles: dict | None = None) -> Any:
    """MetricResources for CLI scoring: the profile's embedder and scorer, built lazily on first use.

    `roles` (role -> resolved model spec, as a run manifest stores them) takes precedence over the
    profile; nothing is loaded until a metric asks.
    """
    from bench.context import BenchContext, default_cache_dir
    from bench.profiles import Profile, resolve_profile

    prof = Profile(profile, "", roles) if roles else resolve_profile(profile)
    return BenchContext(prof, default_cache_dir())


def _fmt(v: float) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"


def _jsonable(values: dict[str, float]) -> dict[str, float | None]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}


# ----------------------------------------------------------------------------------- commands
def run_score(args: argparse.Namespace) -> int:
    from bench.registry import METRICS
    from metrics.scoring import score_cell

    names = parse_metric_list(args.metrics)
    spec = load_spec(args)
    samples = samples_from_lines(_read_jsonl(args.samples, "samples"))
    needs_models = any(METRICS.meta(n).get("needs") for n in names)
    resources = metric_resources(args.profile) if needs_models else None
    try:
        score = score_cell(samples, spec, names, resources)
    except ValueError as exc:  # e.g. an invalid JSON Schema
        raise BenchError(str(exc)) from None
    if args.json:
        out: Any = _jsonable(score.values)
        if args.per_sample:
            out = {"metrics": out, "samples": score.rows, "info": score.info}
        print(json.dumps(out, ensure_ascii=False, sort_keys=not args.per_sample))
        return 0
    width = max(len(n) for n in names)
    print(f"{len(samples)} samples, task {spec.name}")
    for n in names:
        better = METRICS.meta(n).get("better")
        arrow = {"up": "↑", "down": "↓"}.get(better or "", " ")
        print(f"  {n:<{width}}  {arrow} {_fmt(score.values[n])}")
    if "meteor" in score.info:
        print(f"  (meteor variant: {score.info['meteor']})")
    if args.per_sample:
        for row in score.rows:
            detail = row["error"] or ", ".join(row["tsr_failures"]) or ""
            print(f"  #{row['index']:<4} {row['status']:<17} {detail[:100]}")
    return 0


def run_rescore(args: argparse.Namespace) -> int:
    from bench.runlock import RunLock
    from bench.store import RunStore

    store = RunStore(args.run_dir)
    if not store.exists():
        raise BenchError(f"not a run directory (no manifest.json): {args.run_dir}")
    with RunLock(args.run_dir):
        return _rescore_locked(args, store)


def _rescore_locked(args: argparse.Namespace, store: Any) -> int:
    from bench.cells import load_task_cached
    from bench.store import read_json
    from metrics.scoring import score_cell

    manifest = store.read_manifest()
    suite = manifest.get("suite") or {}
    names = parse_metric_list(args.metrics or ",".join(suite.get("metrics") or []))
    tasks = {t["name"]: t for t in suite.get("tasks") or []}
    data_dir = args.data_dir or manifest.get("data_dir")
    roles_by_system = manifest.get("roles") or {}
    profile = manifest.get("profile") or "embedded"
    resources: dict[str, Any] = {}
    results: dict[str, dict[str, float]] = {}
    n_cells = 0
    for cell in store.iter_cells():
        if cell.status != "ok":
            continue
        key = cell.key
        if key.task not in tasks:
            raise BenchError(f"cell {key.label()}: task {key.task!r} is not in the run manifest")
        spec = load_task_cached(tasks[key.task], data_dir)
        if key.system not in resources:
            resources[key.system] = metric_resources(profile, roles_by_system.get(key.system))
        samples = store.read_samples(key)
        score = score_cell(samples, spec, names, resources[key.system])
        values = dict(cell.metrics)  # keep efficiency figures the runner derived from usage
        values.update(score.values)
        record = read_json(cell.path / "cell.json")
        record["scoring"] = score.info
        record["rescored"] = time.time()
        store.write_cell(key, record=record, samples=samples, sample_rows=score.rows, metrics=values)
        results[key.label()] = score.values
        n_cells += 1
    report = _rerender_report(Path(args.run_dir))
    if args.json:
        print(json.dumps({k: _jsonable(v) for k, v in results.items()}, sort_keys=True))
    else:
        print(
            f"rescored {n_cells} cells with {len(names)} metrics" + (f"; report: {report}" if report else "")
        )
    return 0


def _rerender_report(run_dir: Path) -> str | None:
    try:
        from reports.markdown import write_report_md
    except ImportError:
        return None
    try:
        write_report_md(run_dir)
        return str(run_dir / "report.md")
    except Exception as exc:  # the scores are written; a report failure must not hide that
        print(f"warning: report not re-rendered: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
