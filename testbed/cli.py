"""The ``testbed`` command: ``testbed <noun> <verb> [--json]``.

Each noun lives in its own module under :mod:`testbed.commands` and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` (called with the parsed args; returns an exit status).
Errors a user can cause are :class:`~testbed.errors.TestbedError`: one line on stderr, its exit code
(2 for bad input or missing root), never a traceback. Anything else is a bug of the testbed: the
traceback goes to a crash log and the user gets one line naming that file and where to report it.
SIGTERM and SIGHUP unwind like Ctrl-C (so ``with`` blocks tear down what they built); the exit status is
128 + the signal number, as a shell reports it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path

from testbed import __version__
from testbed.errors import TestbedError

#: Where a crash log tells the user to report it.
BUG_REPORTS = "the scaleout-testbed issue tracker (`issues`), with the crash log attached"

#: Command modules, in the order ``testbed --help`` lists them.
COMMANDS = (
    "up", "exec", "down", "ls", "doctor", "clean", "topo", "run", "results", "bench", "fail", "controller",
    "roce", "rdma", "p4", "link", "pfc", "plan", "validate", "cluster", "collective",
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (not the full usage) on bad input."""

    def error(self, message):
        self.exit(2, f"testbed: error: {message} (see '{self.prog} --help')\n")

    def format_help(self):
        # A help string with a stray '%' must not turn `--help` into a traceback.
        try:
            return super().format_help()
        except (ValueError, TypeError, KeyError) as exc:
            raise _HelpBug(self.prog, exc) from exc


class _HelpBug(Exception):
    """A parser's help text cannot be formatted (a bug of the testbed, reported as one)."""

    def __init__(self, prog: str, exc: Exception):
        super().__init__(f"the help of `{prog}` cannot be formatted ({exc}); "
                         "a help string probably has an unescaped '%' (write '%%')")


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


def _port_type(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
        if not low <= value <= 65535:
            raise argparse.ArgumentTypeError(f"must be a port in {low}..65535, got {text!r}")
        return value
    parse.__name__ = "port"
    return parse


#: argparse ``type=`` for a port to connect to: 1..65535 (a bad one is argparse's one line naming the flag).
port = _port_type(1)
#: argparse ``type=`` for a port to bind: 0..65535, 0 = a free one the kernel picks.
bind_port = _port_type(0)


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
    """Run ``func(*args)``: a :class:`TestbedError` becomes one line on stderr and its exit code; an
    interruption (Ctrl-C, SIGTERM, SIGHUP) exits 128 + signal after the ``with`` blocks tore down; any
    other exception is a crash: its traceback goes to a log whose path is printed (exit 1)."""
    from testbed.emu.signals import Terminated, terminate_raises

    try:
        with terminate_raises():
            return int(func(*args) or 0)
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated as exc:
        print(f"testbed: interrupted by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - a bug: log it, say where, never a bare traceback
        return report_crash(exc)


def crash_log_dir() -> Path:
    return Path(os.environ.get("TESTBED_CRASH_DIR") or tempfile.gettempdir())


def report_crash(exc: BaseException) -> int:
    """Write the traceback of a testbed bug to a crash log; print one line naming it; return 1."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = (f"scaleout-testbed {__version__} crashed\nargv: {sys.argv}\npython: {sys.version}\n\n"
            + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    try:
        folder = crash_log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / f"scaleout-testbed-crash-{stamp}-{os.getpid()}.log"
        log.write_text(text)
        where = f"details in {log}"
    except OSError as err:
        sys.stderr.write(text)
        where = f"could not write a crash log ({err}); the traceback is above"
    print(f"testbed: internal error ({type(exc).__name__}: {str(exc)[:200]}); this is a bug of the testbed, "
          f"not of your input; {where}; please report it to {BUG_REPORTS}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except _HelpBug as exc:
        return report_crash(exc)
    return run_guarded(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
