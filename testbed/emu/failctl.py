"""Failure schedules on a running replica (root glue): the control paths of ``testbed fail``, and a driver
that runs a :mod:`testbed.failures` schedule in a thread from a start the caller names.

    control = FabricControl(rep, G, ctl=controller_client_or_None, method="portmod" | "ifdown")
    driver = FailureDriver(control, events, t0=lambda: <epoch seconds, or None while not started>)
    ...                                   the run: the driver waits for t0, then runs the events on time
    record = driver.finish()              stops it, restores what is still failed: {t0, log, skipped,
                                          restored, error}

A collective passes its ranks' start barrier as ``t0``, a scenario the moment its traffic started. The
control does what ``testbed fail`` does: ``portmod`` posts to the controller's API (``/fail/link``,
``/fail/switch``: OpenFlow port-mod, the controller reroutes); ``ifdown`` (and every replica without a
controller, as ``testbed fail`` on BMv2) takes the link down with ``ip link`` as a cable cut looks
(:meth:`testbed.emu.replica.Replica.cut_interfaces`; a crashed switch: its own end of every link); gray
loss changes the loss of the link's userspace link node both ways, as ``testbed fail gray`` does (its
``set_loss``: :func:`testbed.links.wire.set_link_loss`; emu imports no links module, the node is handed in),
or, on a link tc HTB shapes on both ends, puts a random-drop filter on each end's egress (the plan's
:func:`testbed.plan.gray.gray_tc`, handed in as ``gray_tc``, run in each end's namespace).
"""

from __future__ import annotations

import threading

from testbed import failures as F
from testbed.errors import EmulationError
from testbed.poll import poll

METHODS = ("portmod", "ifdown")


class FabricControl:
    """What a failure event does on replica ``rep`` (fabric graph ``G``), through ``testbed fail``'s paths.

    Args:
        ctl: the fabric controller's API client (``controllers.launch``), or None (no controller).
        method: ``portmod`` (the controller's API; the default of ``testbed fail``) or ``ifdown``
            (``ip link``, a cable cut as ``testbed fail --method ifdown``); without a controller, ``ifdown``.
        gray_tc: :func:`testbed.plan.gray.gray_tc` to put gray loss on links tc HTB shapes on both ends;
            None: gray loss only where a userspace link node carries the link.
    """

    def __init__(self, rep, G, ctl=None, method: str = "portmod", gray_tc=None):
        if method not in METHODS:
            raise ValueError(f"method {method!r}; allowed: {', '.join(METHODS)}")
        self.rep, self.G, self.ctl = rep, G, ctl
        #: :func:`testbed.plan.gray.gray_tc`, handed in (emu imports no plan module): gray loss on tc HTB links
        self.gray_tc = gray_tc
        self.method = method if ctl is not None else "ifdown"
        if self.method == "ifdown":
            from testbed.emu.ops import warm_netlink

            warm_netlink()

    def link(self, a, b, down: bool):
        if self.method == "portmod":
            return self.ctl.post(f"/{'fail' if down else 'restore'}/link", a=a, b=b)
        from testbed.emu.ops import set_link_state

        names, netns = self.rep.cut_interfaces(a, b)
        set_link_state(names, up=not down, netns=netns)
        return {"method": "ifdown", "interfaces": names}

    def switch(self, s, down: bool):
        if self.method == "portmod":
            return self.ctl.post(f"/{'fail' if down else 'restore'}/switch", s=s)
        return [self.link(peer, s, down) for peer in self.G.neighbors(s)]   # the switch's own ends

    def gray(self, a, b, loss: float):
        try:
            node = self.rep.link_node(a, b)
        except KeyError:    # tc HTB on both ends: a random-drop filter on each egress (testbed.plan.gray)
            if self.gray_tc is None:
                raise EmulationError(f"gray loss on {a}-{b}: no userspace link node carries that link") from None
            for end, cmds in self.gray_tc(self.rep.plan, a, b, loss, self.rep.intf_name):
                self.rep.run_tc(end, cmds)
            return {"method": "tc", "loss_now": loss}
        doc = node.set_loss(loss, loss)     # both ways, as testbed fail gray: testbed.links.wire.set_link_loss
        return {"method": "link node", "node": node.name,
                "loss_now": {d: doc["directions"][d].get("loss_rate_now") for d in ("a>b", "b>a")}}

    def down_interfaces(self, links) -> tuple[list[str], list[str]]:
        """The switch-side interfaces of ``links`` (both ends, and a link node's sides) and, of those, the
        ones administratively down now: what a run must find empty once its schedule is over."""
        from testbed.emu.ops import admin_down, netns_of

        checked, down = [], []
        for a, b in links:
            ends = [([self.rep.intf_name(x, y)], netns_of(self.rep.node(x).pid)) for x, y in ((a, b), (b, a))
                    if self.G.nodes[x].get("role") != "host"]
            if self.rep.plan.link(a, b).via:
                ends.append(self.rep.cut_interfaces(a, b))
            for names, netns in ends:
                checked += names
                down += admin_down(names, netns)
        return checked, down


class FailureDriver:
    """Runs a failure schedule in a thread: waits until ``t0()`` names the start (epoch seconds; None while
    not yet), then runs :class:`testbed.failures.Executor` from it; :meth:`finish` stops it and restores
    what is still failed (links, switches, gray loss), whatever happened."""

    def __init__(self, control, events: list, t0, timeout: float, what: str = "the run to start"):
        self.control, self.events, self.start, self.what = control, list(events), t0, what
        self.t0, self.error, self.timeout = None, None, timeout
        self.exe = F.Executor(self.events, control)
        self.thread = threading.Thread(target=self._drive, name="failure-schedule", daemon=True)
        self.thread.start()

    def _drive(self) -> None:
        try:
            t0 = poll(lambda: True if self.exe.stopped else self.start(), timeout=self.timeout, interval=0.01,
                      what=self.what)
            if self.exe.stopped:    # the run ended (or failed) before it started
                return
            self.t0 = t0
            self.exe.run(t0)
        except Exception as exc:  # noqa: BLE001 - reported by finish()
            self.error = f"{type(exc).__name__}: {exc}"

    def finish(self) -> dict:
        """Stop the schedule, restore what it left failed; ``{t0, log, skipped, restored, error}``."""
        self.exe.stop()
        self.thread.join(timeout=30)
        restored, error = [], self.error or self.exe.error
        for e in F.undo(self.exe.done):
            try:
                F.apply(self.control, e)
                restored.append(e.describe())
            except Exception as exc:  # noqa: BLE001 - one failed restore must not hide the others
                error = error or f"restoring {e.describe()}: {exc}"
        return {"t0": self.t0, "log": self.exe.log, "skipped": [e.describe() for e in self.events[len(self.exe.log):]],
                "restored": restored, "error": error}
