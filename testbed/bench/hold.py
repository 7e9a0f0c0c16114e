"""``python -m testbed.bench.hold SPEC --links MODE``: build the replica ``bench build`` builds, print ``up``,
hold it until killed.

The child of ``testbed bench build --kill``: a crash can only be measured from outside the process that
crashed. It builds exactly what ``bench build`` builds for SPEC (the same plan, the same dead-controller
address for looped fabrics), writes ``up`` on stdout once the replica is ready, then waits for the
SIGKILL that leaves everything to ``testbed clean``. A SIGINT/SIGTERM instead tears it down as any run.
Not a user command: ``testbed up SPEC --wait`` is the way to keep a replica up.
"""

from __future__ import annotations

import argparse
import sys
import threading


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.bench.hold", description=__doc__)
    parser.add_argument("spec")
    parser.add_argument("--links", choices=("htb", "spec", "none"), default="htb")
    parser.add_argument("--out", metavar="DIR")
    args = parser.parse_args(argv)

    from testbed.bench.build import _controller, _plan
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica
    from testbed.links.node import DelayLineNode
    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    G = build_graph(load_spec(resolve_spec(args.spec)))
    plan = _plan(G, args.links, plan_capabilities())
    with Replica(plan, controller=_controller(G), name="bench-kill", out_dir=args.out, wait_connected=0,
                 link_node_class=DelayLineNode):
        print("up", flush=True)
        threading.Event().wait()  # until a signal: SIGKILL (the measurement) or SIGINT/SIGTERM (cleanup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
