"""``testbed bench NAME``: benchmarks that print figures (performance goals live here, not in tests).

Each benchmark is a module in :mod:`testbed.bench` exposing ``register(subparsers)``. Every one runs with
the CPUs kept awake where the machine needs it (testbed/emu/awake.py: on a VM a halted vCPU wakes late,
so a benchmark would measure the hypervisor); stderr says which.
"""

from __future__ import annotations

from testbed.cli import add_verbs, register_all

#: Benchmark modules under testbed.bench.
BENCHES = ("build", "link", "failover", "rdma", "p4", "agg", "collective", "pfc", "cluster")


def register(sub) -> None:
    parser = sub.add_parser("bench", help="benchmarks that print figures (--json for machine output)",
                            description=__doc__)
    bench_sub = add_verbs(parser, "bench", "BENCH")
    register_all(bench_sub, "testbed.bench", BENCHES)
    for bench in bench_sub.choices.values():
        bench.set_defaults(func=_kept_awake(bench.get_default("func")))


def _kept_awake(func):
    def run(args):
        from testbed.console import console
        from testbed.emu.awake import for_machine

        with for_machine() as awake:
            code = func(args)   # bad flags raise: their one line stays the only one
        console.print(f"[dim]CPUs kept awake: {'yes' if awake.on else 'no'} ({awake.why})[/dim]")
        return code
    return run
