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
    "doctor", "clean", "topo", "plan", "run", "bench", "fail", "controller", "roce", "rdma", "p4", "link", "pfc",
    "validate",
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
    register_all(sub, "testbed.commands", COMMANDS)
    return parser


def add_verbs(parser, dest: str = "verb", metavar: str = "VERB"):
    """The required sub-command level under a noun, with the same one-line-error parser class."""
    verbs = parser.add_subparsers(dest=dest, metavar=metavar, parser_class=type(parser))
    verbs.required = True
    return verbs


def register_all(sub, package: str, names) -> None:
    """Let each module ``package.NAME`` add its parser; a module absent from this build is left out
    (an import error inside a present module still raises)."""
    for name in names:
        try:
            module = importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{package}.{name}":
                continue
            raise
        module.register(sub)


def run_guarded(func, *args) -> int:
    """Run ``func(*args)``; a :class:`TestbedError` becomes one line on stderr and its exit code."""
    try:
        return int(func(*args) or 0)
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_guarded(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
