"""The delay line as a Mininet node (root glue): a two-port "switch" that is one emulated link.

::

    u --veth-- [dl3-eth1]  DelayLineNode dl3  [dl3-eth2] --veth-- v
                      linkcore forward (C; or python -m testbed.links.delayline), SCHED_FIFO, AF_PACKET

:class:`~testbed.emu.replica.Replica` inserts it on every edge the replica plan (:mod:`testbed.plan`) gives
the userspace backend, and gives it ``self.run`` (the run registry) before ``start``.
``start()`` turns offloads off, launches the process, records it and polls its stats file until it says
ready; ``stop()`` ends it and keeps its final stats (counters + queue-depth series) in ``stats_path``.
``set_loss()`` changes the running line's loss per direction (a gray failure), counters kept.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mininet.node import Switch

from testbed.emu import ops
from testbed.errors import EmulationError
from testbed.links.core import line_argv
from testbed.links.delayline import DEFAULT_LATE_TOLERANCE_S, read_stats
from testbed.links.model import LinkParams
from testbed.links.wire import spawn_core, stop_delayline, wait_ready


class DelayLineNode(Switch):
    """Mininet node running one userspace delay line between its ports 1 and 2.

    Args:
        name: node name (``dl<i>``).
        link: the *emulated* (already time-dilated) :class:`LinkParams`.
        out_dir: folder for ``<name>-delayline.json`` (stats) and ``.log``.
        seed: random seed of the loss/RED/jitter draws (None: from the OS).
        late_tolerance_s: lateness counted as ``emulator_late``.
        core: ``c`` (compiled, the default), ``python`` or ``bare``; see :mod:`testbed.links.core`.
        cpu: pin the compiled core to this CPU (None: let the scheduler place it).
        pfc: a :class:`testbed.pfc.link.PfcPort`: both directions run PFC (the replica plan's ``pfc.links``).
    """

    def __init__(self, name: str, link: LinkParams | None = None, out_dir: str | os.PathLike | None = None,
                 seed: int | None = None, late_tolerance_s: float = DEFAULT_LATE_TOLERANCE_S,
                 core: str | None = None, cpu: int | None = None, pfc=None, **params):
        if link is None:
            raise EmulationError(f"link node {name}: no link parameters given")
        self.link = link
        self.out_dir = Path(out_dir) if out_dir else Path(tempfile.gettempdir()) / f"testbed-links-{os.getpid()}"
        self.seed = seed
        self.late_tolerance_s = late_tolerance_s
        self.core = core
        self.cpu = cpu
        self.pfc = pfc
        self.core_in_use: str | None = None
        self.stats_path = self.out_dir / f"{name}-delayline.json"
        self.log_path = self.out_dir / f"{name}-delayline.log"
        self.proc = None
        self.final_stats: dict | None = None
        super().__init__(name, **params)

    def port_names(self) -> tuple[str, str]:
        """(interface towards u, interface towards v)."""
        try:
            return self.intfs[1].name, self.intfs[2].name
        except KeyError:
            raise EmulationError(f"link node {self.name} needs ports 1 and 2, has {sorted(self.intfs)}") from None

    def start(self, controllers) -> None:
        a, b = self.port_names()
        for intf in (a, b):
            ops.run(ops.offload_off_argv(intf), what=f"disable offloads on {intf}", check=False)
            ops.run(["sysctl", "-qw", f"net.ipv6.conf.{intf}.disable_ipv6=1"], what=f"disable IPv6 on {intf}",
                    check=False)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.stats_path.unlink(missing_ok=True)
        self.core_in_use, argv = line_argv(a, b, self.link, self.stats_path, core=self.core, seed=self.seed,
                                           late_tolerance_s=self.late_tolerance_s, cpu=self.cpu, pfc=self.pfc)
        run = getattr(self, "run", None)
        if run is None:
            raise EmulationError(f"link node {self.name}: no run registry (start it through Replica)")
        self.proc = spawn_core(run, argv, self.log_path)
        wait_ready(self.proc, self.stats_path, self.log_path, what=f"delay line {self.name} ({a}<->{b})")

    def stats(self) -> dict | None:
        """Latest counters (rewritten every second; the final ones after :meth:`stop`)."""
        return self.final_stats or read_stats(self.stats_path)

    def fresh_stats(self, timeout: float = 5.0) -> dict | None:
        """Counters as of now: asks the running line to rewrite its stats (SIGUSR1) and waits for the file.

        The line rewrites them only every second on its own, so a trial's ledger read right after the
        traffic ended could miss the last second of drops.
        """
        if self.proc is None or self.proc.poll() is not None:
            return self.stats()
        import signal

        from testbed.poll import poll

        before = self.stats_path.stat().st_mtime_ns if self.stats_path.exists() else 0
        self.proc.send_signal(signal.SIGUSR1)
        poll(lambda: self.stats_path.exists() and self.stats_path.stat().st_mtime_ns != before
             and read_stats(self.stats_path) is not None, timeout=timeout, interval=0.01,
             what=f"stats of link node {self.name}")
        return read_stats(self.stats_path)

    def set_loss(self, a_to_b: float | None = None, b_to_a: float | None = None, timeout: float = 5.0) -> dict:
        """Loss of each direction from now on (``a_to_b``: from port 1 towards port 2, i.e. from the link's
        ``u`` end; None keeps a direction as it is); returns the line's stats once it has applied it.

        Raises:
            EmulationError: the line is not running or refused (see :func:`testbed.links.wire.set_link_loss`).
        """
        from testbed.links.wire import set_link_loss

        if self.proc is None or self.proc.poll() is not None:
            raise EmulationError(f"link node {self.name} is not running")
        rates = {d: r for d, r in (("a>b", a_to_b), ("b>a", b_to_a)) if r is not None}
        return set_link_loss(self.proc.pid, self.stats_path, rates, what=self.name, timeout=timeout)

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's signature
        if self.proc is not None:
            self.final_stats = stop_delayline(self.proc, self.stats_path, self.log_path)
            self.proc = None
        super().stop(deleteIntfs)

    def connected(self) -> bool:
        """Mininet asks switches whether they reached a controller; a link has none to reach."""
        return True


def late_tolerance_at(scale: float) -> float:
    """The lateness counted as ``emulator_late`` in a run dilated by ``scale``. The default (250 us) is
    0.25 us of real-world time at the project's scale 1000; a run dilated more -- a slower emulator, such as
    the TCG guest's long haul at 20000 (docs/vm.md) -- keeps that real-world bound (5 ms emulated at 20000)
    instead of one 20 times tighter; a run dilated less keeps the default."""
    return DEFAULT_LATE_TOLERANCE_S * max(1.0, scale / 1000.0)


def node_class(late_tolerance_s: float = DEFAULT_LATE_TOLERANCE_S) -> type[DelayLineNode]:
    """:class:`DelayLineNode`, or a subclass whose ``late_tolerance_s`` defaults to the one given (what a
    replica's ``link_node_class`` takes: Mininet builds the nodes)."""
    if late_tolerance_s == DEFAULT_LATE_TOLERANCE_S:
        return DelayLineNode

    class Node(DelayLineNode):
        def __init__(self, name, *args, **kwargs):
            kwargs.setdefault("late_tolerance_s", late_tolerance_s)
            super().__init__(name, *args, **kwargs)

    Node.__name__ = Node.__qualname__ = "DelayLineNode"
    return Node
