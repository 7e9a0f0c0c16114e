"""The ``testbed`` command: ``testbed <noun> <verb> [--json]``.

Each noun lives in its own module under :mod:`testbed.commands` and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` (called with the parsed args; returns an exit status).
Errors a user can cause are :class:`~testbed.errors.TestbedError`: one line on stderr, its exit code
(2 for bad input or missing root), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from testbed import __version__
from testbed.errors import TestbedError

#: Command modules, in the order ``testbed --help`` lists them.
COMMANDS = (
    "doctor", "clean", "topo", "run", "bench", "fail", "controller", "roce", "rdma", "p4", "link",
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (not the full usage) on bad input."""

    def error(self, message):
        self.exit(2, f"testbed: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="testbed", description="Scaled-down running replicas of AI-cluster fabrics.")
    parser.add_argument("--version", action="version", version=f"scaleout-testbed {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"testbed.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"testbed.commands.{name}":
                continue  # command not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args.func(args)
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
