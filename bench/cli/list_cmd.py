"""`bench list systems|metrics|tasks|profiles|models|backends`: what is registered (imports no model code)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    kinds = ["systems", "metrics", "tasks", "profiles", "models", "backends"]
    p = sub.add_parser(
        "list",
        help="list " + ", ".join(kinds[:-1]) + " or " + kinds[-1],
        description="List what is registered: " + ", ".join(kinds) + ".",
    )
    p.add_argument("what", choices=kinds, help="what to list: " + ", ".join(kinds))
    p.add_argument("--data-dir", help="for tasks: also list concrete tasks found in this data dir")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from bench.registry import BACKENDS, METRICS, SYSTEMS, TASKS

    if args.what == "profiles":
        from bench.profiles import load_catalog

        for name, p in sorted(load_catalog().profiles.items()):
            roles = ", ".join(f"{r}={m}" for r, m in (p.get("roles") or {}).items())
            print(f"{name:12s} {p.get('description', '')}\n{'':12s} {roles}")
            stand_ins = p.get("stand_ins") or {}
            if stand_ins:
                pairs = ", ".join(
                    f"{k}->{v if isinstance(v, str) else v.get('preset')}" for k, v in stand_ins.items()
                )
                print(f"{'':12s} stand-ins: {pairs}")
        return 0
    if args.what == "models":
        from bench.profiles import load_catalog

        for name, m in sorted(load_catalog().models.items()):
            print(f"{name:28s} {m.get('backend', ''):22s} {m.get('model', '')}")
        return 0
    reg = {"systems": SYSTEMS, "metrics": METRICS, "tasks": TASKS, "backends": BACKENDS}[args.what]
    for name in reg.names():
        meta = reg._meta.get(name, {})
        extra = f" [{meta['better']}]" if meta.get("better") else ""
        print(f"{name:24s}{extra:7s} {reg.summary(name)}".rstrip())
    if args.what == "tasks":
        try:
            from bench.tasks import list_tasks

            names = list_tasks(args.data_dir)
            print(f"\nconcrete tasks ({len(names)}):")
            for n in names:
                print(f"  {n}")
        except Exception as exc:  # data dir missing: families above are still useful
            print(f"\n(concrete tasks need a data dir: {exc})")
    return 0
