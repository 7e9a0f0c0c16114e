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
with the same flags. Results go to ``results/NAME/<timestamp>/``: config.json, plan.json, metrics.json,
summary.json, plots, logs, and status.json (ok / failed / interrupted / refused, with the reason) written
last. Nothing is created before the checks that can refuse a run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import signal
import sys
from pathlib import Path

from testbed import __version__
from testbed.console import console, print_json
from testbed.errors import TestbedError, UsageError

REPO_ROOT = Path(__file__).resolve().parent.parent
SCENARIO_DIR = REPO_ROOT / "scenarios"


def _checked_number(cast, flag: str, minimum):
    """argparse ``type=`` for a numeric scenario flag: finite and >= ``minimum`` (> 0 when None)."""
    def parse(text):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if cast is int else 'a number'}, "
                                             f"got {text!r}") from None
        if value != value or value in (math.inf, -math.inf):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if minimum is None and value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text!r}")
        return value
    parse.__name__ = cast.__name__  # argparse names the type in "invalid int value"
    return parse


def scenario_parser(doc: str | None, prog: str | None = None,
                    refuse_failures: str | None = None) -> argparse.ArgumentParser:
    """Parser with the flags every scenario accepts; scenarios add their own before parsing.

    Numeric flags (``type=int`` or ``type=float``) of a scenario are counts, sizes, rates and durations:
    they must be positive and finite, checked here once for every scenario (``--iters 0`` or ``-3`` is one
    line and exit 2, never passed on or silently replaced by a default). A flag that may be zero or
    negative says so with ``minimum=`` (e.g. ``minimum=0``; ``minimum=-math.inf`` for any finite value).

    ``--failures SCHEDULE`` (a failure schedule during the run, docs/failures.md): a scenario that runs one
    adds the flag itself; one that cannot says why in ``refuse_failures``, and the flag is then refused with
    that reason (one line naming it, exit 2), never ignored.
    """
    from testbed.cli import _Parser

    class ScenarioParser(_Parser):
        def parse_args(self, args=None, namespace=None):
            parsed = super().parse_args(args, namespace)
            if refuse_failures and parsed.failures is not None:
                from testbed.errors import SpecError

                raise SpecError("--failures", f"{self.prog} takes no failure schedule: {refuse_failures}")
            return parsed

        def add_argument(self, *names, **kwargs):
            minimum = kwargs.pop("minimum", None)
            if kwargs.get("type") in (int, float):
                flag = next((n for n in names if n.startswith("--")), names[0] if names else "?")
                kwargs["type"] = _checked_number(kwargs["type"], flag, minimum)
            return super().add_argument(*names, **kwargs)

    parser = ScenarioParser(prog=prog, description=(doc or "").split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_escape(doc))
    parser.add_argument("--quick", action="store_true", help="reduced run (under 2 minutes), used by tests")
    parser.add_argument("--out", metavar="DIR", help="results folder (default results/NAME/<timestamp>)")
    parser.add_argument("--json", action="store_true", help="print the JSON summary on stdout")
    if refuse_failures:
        parser.add_argument("--failures", metavar="SCHEDULE", help=f"refused: {_escape(refuse_failures)}")
    return parser


def _escape(doc: str | None) -> str | None:
    """A docstring shown as help: its '%' are literal (argparse would read them as format fields)."""
    return doc.replace("%", "%%") if doc else doc


#: What ``status.json`` can say, and what each means.
STATUSES = {
    "running": "the run is in progress (or was killed: its pid is gone)",
    "ok": "the run completed and wrote its summary",
    "failed": "the run stopped on an error; the reason says which",
    "interrupted": "Ctrl-C, SIGTERM or SIGHUP stopped the run; everything it built was torn down",
    "refused": "bad input, a missing privilege or capability, or a busy machine: nothing was measured",
}


def classify(exc: BaseException | None, finished: bool) -> tuple[str, str]:
    """``(status, reason)`` of a run that ended with ``exc`` (None: normally)."""
    from testbed.emu.registry import LockBusyError
    from testbed.emu.signals import Terminated
    from testbed.errors import TestbedError

    if exc is None:
        return ("ok", "completed") if finished else ("failed", "the scenario ended without writing a summary")
    if isinstance(exc, Terminated):
        return "interrupted", f"stopped by {signal.Signals(exc.signum).name}"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "stopped by Ctrl-C (SIGINT)"
    if isinstance(exc, LockBusyError) or (isinstance(exc, TestbedError) and exc.exit_code in (2, 3)):
        return "refused", str(exc)
    if isinstance(exc, TestbedError):
        return "failed", str(exc)
    return "failed", f"internal error: {type(exc).__name__}: {exc}"


class Results:
    """The results folder of one run; records configuration, environment, metrics and, last, its status.

    The folder is made only when the run first needs it (``res.dir``, ``write_json``, ``path``), so a run
    refused by its checks (not root, bad flags, a busy machine) leaves nothing behind. Once made, it holds
    ``config.json`` and ``status.json`` (``running``, with the pid); leaving the ``with`` block writes
    ``metrics.json`` if the scenario did not (an ok run only), ``plan.json`` if no replica wrote one in the
    folder itself (an index of the sub-folders' plans), then ``status.json`` again, last: ok / failed /
    interrupted / refused with the reason (see :data:`STATUSES`). ``testbed results`` lists them.
    """

    def __init__(self, name: str, args: argparse.Namespace, config: dict | None = None):
        self.name = name
        self.args = args
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self._out = getattr(args, "out", None)
        self._dir = Path(self._out) if self._out else Path("results") / name / stamp
        self.config = dict(config or {})
        self.summary: dict | None = None
        self.started = _dt.datetime.now().isoformat(timespec="seconds")
        self._made = False
        self._written: list[str] = []
        #: the run's emulator health (:meth:`health`), also in the metrics.json written for the run
        self.health_block: dict | None = None

    @property
    def dir(self) -> Path:
        """The results folder, created (with config.json and a ``running`` status.json) on first use."""
        if not self._made:
            self._materialise()
        return self._dir

    def __enter__(self) -> "Results":
        _check_creatable(self._dir, "--out" if self._out else "results folder")
        from testbed.emu.awake import for_machine

        self.awake = for_machine().__enter__()   # the whole run: no vCPU halts while frames are timed
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.awake.__exit__(None, None, None)
        status, reason = classify(exc, self.summary is not None)
        if status == "refused" and not self._made:
            return None  # refused before anything was made: leave nothing behind
        try:
            if status == "ok" and "metrics.json" not in self._written:
                self.write_json("metrics.json", self._metrics_index())
            if not (self._dir / "plan.json").exists():
                self.write_json("plan.json", self._plan_index())
            self._write_status(status, reason)
        except (OSError, TestbedError) as err:
            console.print(f"[red]cannot write the status of {self._dir}: {err}[/red]")
        if status != "ok":
            console.print(f"[dim]{self._dir}: status {status}[/dim]")
        return None

    def _materialise(self) -> None:
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            flag = "--out" if self._out else "results folder"
            raise UsageError(f"{flag} {self._dir}: cannot create it ({exc.strerror or exc}); "
                             "pick a writable folder with --out") from None
        self._made = True
        meta = {"scenario": self.name, "testbed_version": __version__, "argv": sys.argv,
                "started": self.started, "host": platform.node(),
                "kernel": platform.release(), "cpus": os.cpu_count(), "keep_awake": self.awake.record(),
                "args": {k: v for k, v in vars(self.args).items() if not callable(v)}}
        self.write_json("config.json", {**meta, "config": self.config})
        self._write_status("running", "started")

    def _write_status(self, status: str, reason: str) -> None:
        from testbed.emu.registry import process_start

        doc = {"status": status, "reason": reason, "meaning": STATUSES[status], "scenario": self.name,
               "started": self.started, "ended": None if status == "running" else
               _dt.datetime.now().isoformat(timespec="seconds"),
               "pid": os.getpid(), "pid_start": process_start(os.getpid())}
        self.write_json("status.json", doc)

    def _metrics_index(self) -> dict:
        """metrics.json of a scenario that wrote its measurements in other files: its emulator health, the
        summary and where the rest is (so every results folder has the same entry point)."""
        return {"scenario": self.name, **(self.health_block or {}), "summary": self.summary,
                "files": sorted(n for n in self._written if n not in ("config.json", "status.json", "summary.json"))}

    def _plan_index(self) -> dict:
        """plan.json of a run whose replicas wrote their plans in sub-folders (one per mode or trial), or that
        emulates without a replica plan (a fan-in of link cores, soft-RDMA ranks): where the plans are."""
        plans = sorted(str(p.relative_to(self._dir)) for p in self._dir.rglob("plan.json"))
        note = ("the replicas' plans, one per sub-folder" if plans else "no replica plan: this scenario "
                "builds its emulation itself; its parameters are in config.json")
        return {"scenario": self.name, "plans": plans, "note": note}

    def path(self, name: str) -> Path:
        return self.dir / name

    @property
    def out(self):
        """The console for the run's tables and result lines: stdout, or stderr with ``--json``."""
        from testbed.console import data_console

        return data_console(bool(getattr(self.args, "json", False)))

    def write_json(self, name: str, document) -> Path:
        p = self.path(name)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(document, indent=2, default=str) + "\n")
        if name not in self._written:
            self._written.append(name)
        return p

    def health(self, parts: dict | None = None, **evidence) -> dict:
        """The run's ``{"emulator_ok", "emulator"}`` block (:mod:`testbed.emu.runhealth`), said on the run's
        data console in one line; the scenario puts it into ``metrics.json`` (``metrics.update(block)``).

        ``evidence``: :func:`testbed.emu.runhealth.assess`'s keywords for a run measured as one part;
        ``parts``: ``{label: block}`` of a run's trials or modes (each an ``assess`` result), joined.
        """
        from testbed.emu import runhealth

        block = runhealth.combine(parts) if parts is not None else runhealth.assess(**evidence)
        self.health_block = block
        self.out.print(runhealth.line(block), markup=False, highlight=False, soft_wrap=True)
        return block

    def finish(self, summary: dict) -> None:
        """Write summary.json and print it (stdout with --json, a pointer on stderr otherwise)."""
        self.summary = summary
        self.write_json("summary.json", summary)
        if getattr(self.args, "json", False):
            print_json(summary)
        console.print(f"results in [bold]{self.dir}[/bold]")


def _check_creatable(folder: Path, flag: str) -> None:
    """Refuse (before anything is built) a results folder that cannot be created or written."""
    probe = folder.absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{flag} {folder}: {str(probe)!r} is a file, not a folder; pick another --out")
    if not os.access(probe, os.W_OK | os.X_OK, effective_ids=True):
        raise UsageError(f"{flag} {folder}: cannot create it ({probe} is not writable); "
                         "pick a writable folder with --out")


def run_main(main) -> int:
    """Entry point for ``python scenarios/NAME.py``: one-line errors, exit codes as the CLI."""
    from testbed.cli import run_guarded

    return run_guarded(main)


def available() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.py") if not p.stem.startswith("_"))
