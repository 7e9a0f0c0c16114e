"""Expedited RCU grace periods while a large teardown runs, the kernel's setting put back after.

Why: tearing down an Open vSwitch userspace (netdev) datapath is one AF_PACKET socket close per port in
ovs-vswitchd, and ``packet_release()`` waits out an RCU grace period (``synchronize_net()``) for each, one
after the other. Measured on the 2-core VM (80 bridges x 8 veth ports, one ``del-br`` transaction):
9.7 s normal, 2.2 s with ``/sys/kernel/rcu_expedited`` at 1; the bridges of a fat-tree k=8 replica 10.1 s
-> 2.7 s. Nothing in OVS batches those closes, and the grace period is the kernel's, so the knob is the
lever. Expedited grace periods interrupt every CPU (IPIs), so the setting lasts only the teardown.

The old value is saved first (``<state>/rcu_expedited.json``, with the pid and start time of the process
that changed it: :mod:`testbed.emu.owned`), so a teardown killed halfway is undone by the next teardown or ``testbed clean``.
Where the knob is absent or read-only (a container), or already 1 (``rcupdate.rcu_expedited=1`` at boot,
or another teardown of ours), nothing is changed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.emu.owned import save_owned, saved_by_dead_owner

KNOB = Path("/sys/kernel/rcu_expedited")
SAVED = "rcu_expedited.json"


def restore_orphaned(state: Path, alive: Callable[[int, float | None], bool], knob: Path = KNOB) -> bool:
    """Put the knob back when the process that changed it died before it could; True when it did."""
    doc = saved_by_dead_owner(state / SAVED, alive)
    if doc is None:
        return False
    try:
        knob.write_text(str(doc.get("value", "0")))
    except OSError:
        return False
    (state / SAVED).unlink(missing_ok=True)
    return True


@contextmanager
def expedited(state: Path, alive: Callable[[int, float | None], bool], start: float | None,
              knob: Path = KNOB) -> Iterator[bool]:
    """Within the block, RCU grace periods are expedited; yields whether this call changed the knob.

    Args:
        state: the run registry's state directory (where the old value is saved).
        alive: ``alive(pid, start)``: is that process still the one that saved a value.
        start: this process's start time (what ``alive`` compares).
    """
    restore_orphaned(state, alive, knob)
    try:
        old = knob.read_text().strip()
    except OSError:
        old = None
    if old != "0":
        yield False
        return
    saved = state / SAVED
    try:
        save_owned(saved, {"value": old}, os.getpid(), start)
        knob.write_text("1")
    except OSError:
        saved.unlink(missing_ok=True)
        yield False
        return
    try:
        yield True
    finally:
        try:
            knob.write_text(old)
            saved.unlink(missing_ok=True)
        except OSError:
            pass  # left saved: restore_orphaned() retries once this process is gone
