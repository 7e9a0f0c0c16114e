"""``testbed results [DIR] [--failed] [--json]``: the results folders and what each says it is.

Every scenario run writes ``status.json`` last (see :mod:`testbed.scenario`): ok, failed, interrupted or
refused, with the reason. A folder still saying ``running`` whose process is gone was killed (SIGKILL, a
power loss) and is listed as ``killed``; a folder without ``status.json`` predates status files and is
``unknown``. Without ``--failed`` every run is listed; with it, every run that is not ``ok``, so leftovers
of failed attempts never pass for real results.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from testbed.console import console, out, print_json
from testbed.errors import UsageError


def register(sub) -> None:
    parser = sub.add_parser("results", help="list results folders with their status (ok/failed/...)",
                            description=__doc__)
    parser.add_argument("root", nargs="?", default="results", metavar="DIR",
                        help="folder holding NAME/<timestamp>/ results (default ./results)")
    parser.add_argument("--failed", action="store_true", help="only runs that are not ok")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(func=_results)


def run_status(folder: Path) -> dict:
    """What one results folder says it is: {"path", "scenario", "started", "status", "reason"}."""
    from testbed.emu.registry import same_process

    row = {"path": str(folder), "scenario": folder.parent.name, "started": None}
    try:
        doc = json.loads((folder / "status.json").read_text())
    except FileNotFoundError:
        return {**row, "status": "unknown", "reason": "no status.json (an older run, or killed at its start)"}
    except (OSError, ValueError) as exc:
        return {**row, "status": "unknown", "reason": f"unreadable status.json: {exc}"}
    row.update(scenario=doc.get("scenario") or row["scenario"], started=doc.get("started"),
               status=doc.get("status", "unknown"), reason=doc.get("reason", ""))
    if row["status"] == "running" and not same_process(int(doc.get("pid") or 0), doc.get("pid_start")):
        row.update(status="killed", reason="its process died without a final status (SIGKILL, power loss?)")
    return row


def scan(root: Path) -> list[dict]:
    """Every ``NAME/<timestamp>/`` folder under ``root`` that holds config.json or status.json, oldest first."""
    folders = {p.parent for pattern in ("*/*/status.json", "*/*/config.json") for p in root.glob(pattern)}
    rows = [run_status(f) for f in folders]
    return sorted(rows, key=lambda r: (r["started"] or "", r["path"]))


def _results(args) -> int:
    root = Path(args.root)
    if not root.is_dir():
        raise UsageError(f"DIR {args.root}: no such folder; give the folder holding results/NAME/<timestamp>/")
    rows = scan(root)
    if args.failed:
        rows = [r for r in rows if r["status"] != "ok"]
    if args.json:
        print_json({"root": str(root), "runs": rows})
        return 0
    if not rows:
        console.print(f"no {'failed ' if args.failed else ''}runs under {root}")
        return 0
    colour = {"ok": "green", "failed": "red", "killed": "red", "interrupted": "yellow", "refused": "yellow"}
    table = Table(title=f"runs under {root}", title_justify="left")
    for col in ("scenario", "started", "status", "reason", "folder"):
        table.add_column(col, overflow="fold")
    for r in rows:
        c = colour.get(r["status"], "white")
        table.add_row(r["scenario"], r["started"] or "?", f"[{c}]{r['status']}[/{c}]", r["reason"], r["path"])
    out.print(table)
    return 0
