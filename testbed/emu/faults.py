"""Faults injected on a running replica's interfaces, with what this kernel has (no netem, no gact).

* :func:`blackhole_argv` -- everything an interface sends is dropped, carrier up (what BFD is for).
* :func:`set_link_loss` -- a running link node starts (or stops) losing a fraction of what crosses it,
  carrier up, counters running: a gray failure (:mod:`testbed.links.control`; ``testbed fail gray``).

It replaces the interface's root qdisc: use it on unshaped links (``links=off``), undo with ``on=False``.

A drop at a qdisc happens before the veth counts the packet as sent, and a veth's peer counts as
received exactly what it sent: on a plain veth pair no loss ever shows in the two ends' counters. Loss
that counters must see (a gray failure for :mod:`testbed.routing.gray`) has to happen between two
counting points, e.g. inside a link node between two veth pairs.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from testbed.emu import ops
from testbed.errors import EmulationError


def blackhole_argv(intf: str, on: bool) -> list[list[str]]:
    """Drop everything ``intf`` sends while its carrier stays up, or undo it.

    The kernel's ``blackhole`` qdisc as the root: every packet is dropped at enqueue and counted in its
    ``dropped`` statistic; nothing is held back. (A token bucket of 1 kbit/s, used before, queued packets
    and let them out seconds later, BFD control packets among them, so detection took 0.5-2.7 s instead
    of 3 x 50 ms.)
    """
    ops.check_ifname(intf)
    if not on:
        return [["tc", "qdisc", "del", "dev", intf, "root"]]
    return [["tc", "qdisc", "replace", "dev", intf, "root", "blackhole"]]


def apply(argvs: list[list[str]], what: str) -> None:
    for argv in argvs:
        ops.run(argv, what=what)


def set_link_loss(pid: int, stats_path: str | os.PathLike, rates: dict, what: str, timeout: float = 5.0) -> dict:
    """Change the loss of the running link node ``pid`` (which writes ``stats_path``) and wait until it says so.

    Args:
        rates: ``{"a>b": 0.1, "b>a": 0.0}`` (a direction left out keeps its loss).
        what: the link, for errors (``dl3 (s1 - l1)``).

    Returns:
        The node's stats right after the change (``control_seq``, per direction ``loss_rate_now``).

    Raises:
        ValueError: a bad direction or rate (checked before anything is written).
        EmulationError: the node is gone, did not answer within ``timeout``, or refused the request.
    """
    from testbed.links.control import acknowledged, control_path, render_control
    from testbed.links.delayline import read_stats
    from testbed.poll import poll

    before = read_stats(stats_path)
    if before is None:
        raise EmulationError(f"link node {what}: no stats file at {stats_path} (is it running?)")
    seq = int(before.get("control_seq", 0)) + 1
    text = render_control(seq, rates)
    ctl = control_path(stats_path)
    tmp = ctl.with_name(ctl.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, ctl)
    try:
        os.kill(pid, signal.SIGUSR2)
    except ProcessLookupError:
        raise EmulationError(f"link node {what}: process {pid} is gone") from None
    try:
        doc = poll(lambda: (lambda d: d if acknowledged(d, seq) else None)(read_stats(stats_path)),
                   timeout=timeout, interval=0.005, what=f"link node {what} to take the new loss")
    except TimeoutError:
        raise EmulationError(f"link node {what} did not acknowledge the loss change within {timeout:g} s; "
                             f"see {Path(stats_path).with_name(Path(stats_path).name.replace('.json', '.log'))}") \
            from None
    if doc.get("control_error"):
        raise EmulationError(f"link node {what} refused the loss change: {doc['control_error']}")
    return doc
