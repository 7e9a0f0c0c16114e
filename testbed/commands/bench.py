"""``testbed bench NAME``: benchmarks that print figures (performance goals live here, not in tests).

Each benchmark is a module in :mod:`testbed.bench` exposing ``register(subparsers)``. Every one runs with
the CPUs kept awake where the machine needs it (testbed/emu/awake.py: on a VM a halted vCPU wakes late,
so a benchmark would measure the hypervisor); stderr says which. Not ``collective`` (:data:`AWAKE_OFF`):
with the spinners its soft-RDMA ranks ran slower, not faster (``TESTBED_KEEP_AWAKE=1`` puts them back).
"""

from __future__ import annotations

from testbed.cli import add_verbs, register_all

#: Benchmark modules under testbed.bench.
BENCHES = ("build", "link", "failover", "rdma", "p4", "agg", "collective", "pfc", "cluster")
#: benchmarks run without the spinners unless TESTBED_KEEP_AWAKE=1, and why (measured, one line)
AWAKE_OFF = {"collective": "bench collective: with spinners its ring allreduce reached 0.75-0.83 of the link, "
                           "without 0.91-0.93 (docs/collectives.md \"Where the ring's time went\")"}


def register(sub) -> None:
    parser = sub.add_parser("bench", help="benchmarks that print figures (--json for machine output)",
                            description=__doc__)
    bench_sub = add_verbs(parser, "bench", "BENCH")
    register_all(bench_sub, "testbed.bench", BENCHES)
    for name, bench in bench_sub.choices.items():
        bench.set_defaults(func=_kept_awake(bench.get_default("func"), AWAKE_OFF.get(name)))


def awake_environ(off_why: str | None, environ=None) -> tuple[dict, str | None]:
    """The environment for :func:`testbed.emu.awake.for_machine` and the reason to print instead of its own:
    a benchmark in :data:`AWAKE_OFF` runs without spinners unless ``TESTBED_KEEP_AWAKE`` says otherwise."""
    import os

    environ = dict(os.environ if environ is None else environ)
    if off_why is None or environ.get("TESTBED_KEEP_AWAKE", "").strip() in ("0", "1"):
        return environ, None
    return environ | {"TESTBED_KEEP_AWAKE": "0"}, off_why


def _kept_awake(func, off_why: str | None = None):
    def run(args):
        from testbed.console import console
        from testbed.emu.awake import for_machine

        environ, why = awake_environ(off_why)
        with for_machine(environ=environ) as awake:
            code = func(args)   # bad flags raise: their one line stays the only one
        console.print(f"[dim]CPUs kept awake: {'yes' if awake.on else 'no'} ({why or awake.why})[/dim]")
        return code
    return run
