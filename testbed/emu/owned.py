"""A machine setting's saved old value, with the process that changed it: how a killed run is undone.

Why: a run that changes something shared by the whole machine (the softirq threads' priority, expedited
RCU, ovs-vswitchd's send buffer) puts it back on every way out of its ``with`` block, except SIGKILL. So
it first saves the old value in the run registry's state directory, under its own pid and start time::

    <state>/<name>.json   {"pid": 4242, "start": 1764840000.12, ...what to put back..., "at": <time>}

and the next run that touches the setting, or ``testbed clean``, puts the value back once that process
(pid *and* start time: a reused pid is not the owner) is gone. This module is that record, written and
read the same way by each setting (:mod:`testbed.emu.softirq`, :mod:`testbed.emu.rcu`,
:mod:`testbed.emu.ovssndbuf`). Pure file handling: ``alive(pid, start)`` is passed in
(:func:`testbed.emu.registry.same_process`, a fake in the unit tests).

(A test VM group's folder names its owner too, ``/tmp/scaleout-vm-*/owner``, but as plain text inside the
folder it guards, and an unreadable one means the folder is stale: :func:`testbed.emu.vm.stale_dirs`.)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path


def saved_by_dead_owner(path: Path, alive: Callable[[int, float | None], bool]) -> dict | None:
    """The record at ``path`` when the process that saved it is gone (what to put back), else None.

    None also when there is no record, or it is not one (unreadable, not a JSON object, no whole pid):
    nothing known to put back. A live owner's record is its own business.
    """
    try:
        doc = json.loads(Path(path).read_text())
        pid = int(doc.get("pid", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    if alive(pid, doc.get("start")):
        return None
    return doc


def save_owned(path: Path, doc: dict, pid: int, start: float | None) -> None:
    """Write ``doc`` at ``path`` as owned by process ``pid`` started at ``start`` (with the time, ``at``).

    Written whole or not at all (a temporary file renamed over it): a run killed while writing leaves no
    half record that would hide the setting from the next run. Raises OSError (the caller then changes
    nothing).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**doc, "pid": pid, "start": start, "at": time.time()}))
    os.replace(tmp, path)
