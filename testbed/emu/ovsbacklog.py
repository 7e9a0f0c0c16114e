"""How far ovs-vswitchd's userspace datapath fell behind: bytes waiting in its ports' receive sockets.

Why not its CPU: OVS's main loop takes what the machine gives it. Measured (fat-tree-k4, 4 MiB ring
allreduce at 10 Mbit/s, 5 Dec 2026): one 4-rank job alone kept ovs-vswitchd at 98% of a core (4.82 CPU-s
in 6.16 s) and ran at the ring's bound (5.35 s); two such jobs together, twice the frames, took 3.17 CPU-s
in 8.16 s (66% at most) and each still ran in 5.38 s. With a core to spare it wakes for every frame or
two; with less it reads larger batches. A busy main loop is not a saturated one. One that cannot keep
up leaves frames in the kernel: its port sockets' receive queues grow (``Rmem`` in ``/proc/PID/net/
packet``: the bytes the kernel charges for the frames queued, ~2x a frame's size with its buffer), and
each waiting frame is that much later than the link model says. So the verdict reads the backlog.

    socket_inodes(pid)                 the packet sockets ovs-vswitchd holds (its /proc/PID/fd)
    receive_backlog(text, inodes)      pure: sum of Rmem over those bound to a port (Iface != 0)
    BacklogWatch(pid)                  a thread sampling it every SAMPLE_S while a run goes on
"""

from __future__ import annotations

import os
import re
import threading

#: sampling period (the main loop's stalls that matter last tens of ms)
SAMPLE_S = 0.05
#: a backlog above this at any sample means OVS fell behind: ~32 full frames (1,082 B, ~2.3 KB charged each)
#: waiting across its ports -- at the 10 Mbit/s links of a collective replica that is ~28 ms of one link
BEHIND_BYTES = 75_000


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process ``pid`` holds (``socket:[N]`` links in /proc/PID/fd)."""
    out = set()
    base = f"/proc/{pid}/fd"
    for fd in os.listdir(base):
        try:
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(f"{base}/{fd}"))
        except OSError:        # closed meanwhile
            continue
        if m:
            out.add(int(m.group(1)))
    return out


def receive_backlog(packet_text: str, inodes: set[int]) -> int:
    """Bytes queued on the receive side of the packet sockets ``inodes`` that are bound to a port
    (``/proc/PID/net/packet`` text: ``sk RefCnt Type Proto Iface R Rmem User Inode``; Iface 0 is OVS's
    one send socket, whose Rmem is always 0)."""
    total = 0
    for line in packet_text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 9 and f[4] != "0" and int(f[8]) in inodes:
            total += int(f[6])
    return total


class BacklogWatch:
    """Samples ovs-vswitchd's receive backlog on a thread; ``summary()`` gives its peak and mean."""

    def __init__(self, pid: int):
        self.pid = pid
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            inodes = socket_inodes(self.pid)
            path = f"/proc/{self.pid}/net/packet"
            while not self._stop.wait(SAMPLE_S):
                with open(path) as f:
                    self.samples.append(receive_backlog(f.read(), inodes))
        except OSError:          # ovs-vswitchd went away: the run says so elsewhere; stop sampling
            pass

    def __enter__(self) -> "BacklogWatch":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(timeout=2)

    def summary(self) -> dict:
        """``max_bytes``, ``mean_bytes``, ``samples``, ``behind``: the peak above :data:`BEHIND_BYTES`."""
        peak = max(self.samples, default=0)
        return {"max_bytes": peak, "mean_bytes": round(sum(self.samples) / len(self.samples)) if self.samples else 0,
                "samples": len(self.samples), "behind": peak > BEHIND_BYTES}
