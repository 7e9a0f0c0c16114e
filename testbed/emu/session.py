"""The replica kept up by ``testbed up``, as other terminals see it (``exec``, ``down``, ``ls``).

One replica at a time per machine (the run registry's lock: interface names are global). While it is up,
``testbed up`` keeps a small record next to the run registry::

    /run/scaleout-testbed/up.json   {"pid", "start", "run_id", "name", "spec", "out_dir", "started",
                                     "nodes": {name: {"pid", "kind", "ip"}}, "links": [[a, b], ...]}

``pid``/``start`` identify the ``testbed up`` process (a reused pid is never signalled); each node's
``pid`` is its Mininet shell, whose namespaces ``testbed exec`` enters. The record is written once the
replica is up and removed before teardown ends; one whose process is gone is stale and is dropped by the
next reader (its objects are the run registry's business: ``testbed clean``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from testbed.emu.registry import is_running, state_dir
from testbed.errors import UsageError

FILE = "up.json"


def path(root: Path | None = None) -> Path:
    return (Path(root) if root else state_dir()) / FILE


def write(doc: dict, root: Path | None = None) -> Path:
    p = path(root)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, p)
    return p


def remove(pid: int, root: Path | None = None) -> None:
    """Remove the record if it is this process's (never another live replica's)."""
    doc = read(root, drop_stale=False)
    if doc is not None and doc.get("pid") == pid:
        path(root).unlink(missing_ok=True)


def read(root: Path | None = None, drop_stale: bool = True) -> dict | None:
    """The live replica's record, or None. A record whose ``testbed up`` process is gone is stale:
    dropped (``drop_stale``) and None returned."""
    p = path(root)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        if drop_stale:
            p.unlink(missing_ok=True)
        return None
    if not is_running(int(doc.get("pid") or 0), doc.get("start")):
        if drop_stale:
            p.unlink(missing_ok=True)
        return None
    return doc


def require(root: Path | None = None) -> dict:
    """The live replica's record; UsageError (exit 2) when none is up."""
    doc = read(root)
    if doc is None:
        raise UsageError("no replica is up on this machine: start one with `sudo testbed up SPEC` "
                         "(`testbed ls` shows what runs)")
    return doc


def node(doc: dict, name: str) -> dict:
    """One node of the record, by its name; UsageError listing the names otherwise."""
    nodes = doc.get("nodes", {})
    if name not in nodes:
        names = sorted(nodes)
        shown = ", ".join(names[:20]) + (f", ... ({len(names)} nodes)" if len(names) > 20 else "")
        raise UsageError(f"NODE {name!r}: no such node in replica {doc.get('name')!r}; nodes: {shown}")
    return nodes[name]


def substitute(argv: list[str], doc: dict) -> list[str]:
    """Mininet's convenience: an argument that is exactly a host's name becomes its address."""
    nodes = doc.get("nodes", {})
    return [nodes[a]["ip"] if a in nodes and nodes[a].get("ip") else a for a in argv]


def enter_argv(pid: int, argv: list[str]) -> list[str]:
    """Run ``argv`` in the network and mount namespaces of process ``pid`` (a node's shell)."""
    return ["nsenter", f"--target={pid}", "--net", "--mount", "--", *argv]
