"""``testbed bench NAME``: benchmarks that print figures (performance goals live here, not in tests).

Each benchmark is a module in :mod:`testbed.bench` exposing ``register(subparsers)``.
"""

from __future__ import annotations

import importlib

#: Benchmark modules under testbed.bench.
BENCHES = ("build", "link", "failover", "rdma", "p4", "agg")


def register(sub) -> None:
    parser = sub.add_parser("bench", help="benchmarks that print figures (--json for machine output)",
                            description=__doc__)
    bench_sub = parser.add_subparsers(dest="bench", metavar="BENCH", parser_class=type(parser))
    bench_sub.required = True
    for name in BENCHES:
        try:
            module = importlib.import_module(f"testbed.bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"testbed.bench.{name}":
                continue
            raise
        module.register(bench_sub)
