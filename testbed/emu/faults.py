"""Faults injected on a running replica's interfaces, with what this kernel has (no netem, no gact).

* :func:`blackhole_argv` -- everything an interface sends is dropped, carrier up (what BFD is for).

It replaces the interface's root qdisc: use it on unshaped links (``links=off``), undo with ``on=False``.

A drop at a qdisc happens before the veth counts the packet as sent, and a veth's peer counts as
received exactly what it sent: on a plain veth pair no loss ever shows in the two ends' counters. Loss
that counters must see (a gray failure for :mod:`testbed.routing.gray`) has to happen between two
counting points, e.g. inside a link node between two veth pairs: a running link node's loss changes
at runtime with :func:`testbed.links.wire.set_link_loss` (``testbed fail gray``).
"""

from __future__ import annotations

from testbed.emu import ops


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
