"""``testbed collective chakra``: convert MLCommons Chakra execution traces into a replay trace (no root).

    testbed collective chakra PREFIX -o trace.json            reads PREFIX.0.et, PREFIX.1.et, ... (one per rank)
    testbed collective chakra a.0.et a.1.et -o trace.json     or the files (rank from the .N. in their names)
        [--iterations N] [--data-deps-only] [--json]

Each rank's file may be a binary ET (gzip or not), chakra_jsonizer's JSON or the feeder's workload_graph
JSON. COMP_NODE -> compute, COMM_COLL_NODE -> collective, COMM_SEND/RECV_NODE -> send/recv; other node
types are dropped and their dependencies passed through (docs/collectives.md, "From Chakra execution
traces"). The result is validated and simulated like ``testbed collective trace`` before it is written;
replay it with ``sudo testbed collective run --trace trace.json``.
"""

from __future__ import annotations

import argparse

from testbed.console import out, print_json


def add_parser(verbs) -> None:
    p = verbs.add_parser("chakra", help="convert Chakra execution traces (one .et per rank) into a trace (no root)",
                         description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="PREFIX_OR_FILES", help="a prefix (PREFIX.<rank>.et) or one file per rank")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the trace (JSON, version 1)")
    p.add_argument("--iterations", type=int, default=1, help="repeat the trace N times on replay (default 1)")
    p.add_argument("--data-deps-only", action="store_true",
                   help="order ops by data_deps alone, ignoring ctrl_deps (as ASTRA-sim's feeder does)")
    p.add_argument("--json", action="store_true", help="print the conversion summary as one JSON document")
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    from pathlib import Path

    from testbed.collective.chakra import convert
    from testbed.errors import SpecError

    if args.iterations < 1:
        raise SpecError("--iterations", f"must be an integer >= 1, got {args.iterations}")
    doc, summary = convert(args.inputs, args.iterations, ctrl_deps=not args.data_deps_only)
    try:
        Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        raise SpecError("--output", f"cannot write {args.output}: {exc.strerror}") from None
    summary["output"] = args.output
    if args.json:
        print_json(summary)
        return 0
    ops = summary["ops_per_rank"]
    out.print(f"{args.output}: {summary['ranks']} ranks from {', '.join(summary['files'])}; per rank "
              f"{ops['compute'][0]} compute, {ops['collective'][0]} collectives, "
              f"{sum(ops['send'])} sends and {sum(ops['recv'])} recvs in all")
    dropped = ", ".join(f"{v} {k}" for k, v in summary["dropped"].items()) or "none"
    out.print(f"dropped nodes: {dropped}; comm nodes on the CPU replayed as compute: {summary['cpu_comm_as_compute']}; "
              f"sizes rounded up: {summary['sizes_rounded']}; ctrl_deps ignored: {summary['ctrl_deps_ignored']}")
    out.print(f"valid; bytes sent per rank {summary['sent_bytes_per_rank']}, compute alone "
              f"{summary['compute_only_step_s'] * 1e3:g} ms per iteration; replay: "
              f"sudo testbed collective run --trace {args.output}")
    return 0
