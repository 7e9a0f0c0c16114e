"""``testbed run NAME [--quick] [--out DIR] [--json]``: run a scenario from ``scenarios/``."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from testbed.errors import UsageError
from testbed.scenario import SCENARIO_DIR, available


def register(sub) -> None:
    parser = sub.add_parser("run", help="run a scenario (scenarios/NAME.py)", description=__doc__,
                            add_help=False)
    parser.add_argument("name", nargs="?", metavar="NAME", help="scenario name; omit to list them")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="flags passed to the scenario (--help too)")
    parser.add_argument("-h", "--help", action="store_true", dest="run_help")
    parser.set_defaults(func=_run, _parser=parser)


def _run(args) -> int:
    names = available()
    if args.name is None:
        if args.run_help:
            args._parser.print_help()
        print("scenarios: " + ", ".join(names))
        return 0
    if args.name not in names:
        raise UsageError(f"unknown scenario {args.name!r}; choose one of: {', '.join(names)}")
    path = SCENARIO_DIR / f"{args.name}.py"
    spec = importlib.util.spec_from_file_location(f"scenarios.{args.name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses (and pickling) look the module up by name
    spec.loader.exec_module(module)
    rest = list(args.rest) + (["--help"] if args.run_help else [])
    return int(module.main(rest) or 0)
