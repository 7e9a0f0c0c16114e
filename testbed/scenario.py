"""What every scenario shares: flags, the results folder, honest metadata.

A scenario is ``scenarios/NAME.py`` with a module docstring (diagram + what it shows) and::

    def main(argv=None) -> int:
        args = scenario_args(__doc__, argv)
        with Results("NAME", args) as res:
            ...                            # build, run, measure
            res.write_json("metrics.json", metrics)
            res.finish(summary)            # prints the JSON summary with --json
        return 0

    if __name__ == "__main__":
        sys.exit(run_main(main))

It runs as ``sudo python scenarios/NAME.py [--quick] [--out DIR] [--json]`` and as ``testbed run NAME``
with the same flags. Results go to ``results/NAME/<timestamp>/`` (config.json, metrics JSON, plots, logs).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
from pathlib import Path

from testbed import __version__
from testbed.console import console, print_json

REPO_ROOT = Path(__file__).resolve().parent.parent
SCENARIO_DIR = REPO_ROOT / "scenarios"


def scenario_parser(doc: str | None, prog: str | None = None) -> argparse.ArgumentParser:
    """Parser with the flags every scenario accepts; scenarios add their own before parsing."""
    from testbed.cli import _Parser

    parser = _Parser(prog=prog, description=(doc or "").split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc)
    parser.add_argument("--quick", action="store_true", help="reduced run (under 2 minutes), used by tests")
    parser.add_argument("--out", metavar="DIR", help="results folder (default results/NAME/<timestamp>)")
    parser.add_argument("--json", action="store_true", help="print the JSON summary on stdout")
    return parser


class Results:
    """The results folder of one run; records configuration, environment and metrics."""

    def __init__(self, name: str, args: argparse.Namespace, config: dict | None = None):
        self.name = name
        self.args = args
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.dir = Path(args.out) if getattr(args, "out", None) else Path("results") / name / stamp
        self.config = dict(config or {})
        self.summary: dict | None = None

    def __enter__(self) -> "Results":
        self.dir.mkdir(parents=True, exist_ok=True)
        meta = {"scenario": self.name, "testbed_version": __version__, "argv": sys.argv,
                "started": _dt.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
                "kernel": platform.release(), "cpus": os.cpu_count(),
                "args": {k: v for k, v in vars(self.args).items() if not callable(v)}}
        self.write_json("config.json", {**meta, "config": self.config})
        return self

    def __exit__(self, *exc) -> None:
        return None

    def path(self, name: str) -> Path:
        return self.dir / name

    def write_json(self, name: str, document) -> Path:
        p = self.path(name)
        p.write_text(json.dumps(document, indent=2, default=str) + "\n")
        return p

    def finish(self, summary: dict) -> None:
        """Write summary.json and print it (stdout with --json, a pointer on stderr otherwise)."""
        self.summary = summary
        self.write_json("summary.json", summary)
        if getattr(self.args, "json", False):
            print_json(summary)
        console.print(f"results in [bold]{self.dir}[/bold]")


def run_main(main) -> int:
    """Entry point for ``python scenarios/NAME.py``: one-line errors, exit codes as the CLI."""
    from testbed.cli import run_guarded

    return run_guarded(main)


def available() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.py") if not p.stem.startswith("_"))
