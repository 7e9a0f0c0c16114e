"""``testbed bench NAME``: benchmarks that print figures (performance goals live here, not in tests).

Each benchmark is a module in :mod:`testbed.bench` exposing ``register(subparsers)``.
"""

from __future__ import annotations

from testbed.cli import add_verbs, register_all

#: Benchmark modules under testbed.bench.
BENCHES = ("build", "link", "failover", "rdma", "p4", "agg", "collective", "pfc")


def register(sub) -> None:
    parser = sub.add_parser("bench", help="benchmarks that print figures (--json for machine output)",
                            description=__doc__)
    bench_sub = add_verbs(parser, "bench", "BENCH")
    register_all(bench_sub, "testbed.bench", BENCHES)
