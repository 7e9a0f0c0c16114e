"""Everything a trial's frame ledger needs from a running replica, read before and after it (root glue).

    watch = TrialWatch(rep, clients, link_nodes, hosts).start()
    ... the trial's traffic ...
    watch.stop(quiet_s=...)   # after-readings once no frame moved for quiet_s (nothing left in flight)
    evidence = watch.evidence(fabric_stats.drops(clients, plan))
        -> {"hops", "ring_drops", "ring_frames_min", "link_stats", "udp_rcvbuf_errors", "switch_socket_drops"}
    watch.own_cpu()   -> CPU seconds of the run's own processes (switches, receivers, ended senders)

Readings: every interface's counters in every namespace of the run (:mod:`testbed.validate.ifcounters`), each
BMv2 switch's capture-ring counters (:mod:`testbed.p4rt.rx`), each link node's stats asked for fresh at both
ends (so they cover exactly the trial: :func:`testbed.links.accounting.stats_delta`), the hosts' UDP
receive-buffer overflows and the switches' packet-socket drops (:class:`testbed.emu.health.LossWatch`).
The arithmetic is pure (:func:`testbed.links.hops.hop_ledger`, :mod:`testbed.validate.trial_ledger`).
"""

from __future__ import annotations

from testbed.emu.health import LossWatch
from testbed.links import accounting, hops
from testbed.p4rt.rx import ring_drops, ring_frames
from testbed.validate import ifcounters

#: Link-node counters of frames it consumed itself (its model's drops, its failed sends, its socket's).
_LINK_CONSUMED = ("drop_tail", "drop_red", "drop_loss", "drop_pfc", "tx_errors", "rx_truncated")


class TrialWatch:
    """Before/after readings around one trial.

    Args:
        rep: the running :class:`testbed.emu.replica.Replica`.
        clients: {switch graph node: SwitchClient} of its BMv2 switches.
        link_nodes: {name: DelayLineNode} of its userspace links.
        hosts: graph nodes of the hosts whose UDP buffers count.
    """

    def __init__(self, rep, clients: dict, link_nodes: dict, hosts, processes: dict | None = None):
        self.rep, self.clients, self.link_nodes = rep, clients, dict(link_nodes)
        pids = [rep.switch(sw).process.proc.pid for sw in clients]
        self.losses = LossWatch(rep, hosts, pids)
        self.pids = {f"switch {rep.switch(sw).name}": rep.switch(sw).process.proc.pid for sw in clients}
        self.pids.update(processes or {})
        self._cpu0: dict = {}
        self._cpu: dict = {}
        self._before: dict = {}
        self._after: dict = {}
        self._lost: dict = {}
        self.settled_s: float | None = 0.0
        self.unsettled: list[str] = []   # counters still moving when the after-readings gave up waiting

    def _read(self) -> dict:
        return {"links": {n.name: n.fresh_stats() for n in self.link_nodes.values()},
                "intf": ifcounters.snapshot(self.rep),
                "rings": {self.rep.switch(sw).name: self.rep.switch(sw).process.rx_stats() for sw in self.clients}}

    def _cpu_now(self) -> dict:
        import resource
        import time

        import psutil

        out = {"_wall": time.monotonic(), "_children": sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2])}
        for name, pid in self.pids.items():
            try:
                t = psutil.Process(pid).cpu_times()
                out[name] = t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
        return out

    def start(self) -> "TrialWatch":
        self._before = self._read()
        self.losses.start()
        self._cpu0 = self._cpu_now()
        return self

    def stop(self, quiet_s: float = 0.0, drain_s: float = 0.0) -> "TrialWatch":
        """End the trial's readings; with ``quiet_s``, the after-readings wait (at most ``3 * quiet_s + 10 +
        drain_s`` seconds) until no interface counter has moved for ``quiet_s`` -- give it the longest one-way
        delay, and ``drain_s`` the time the congestion point's full queue takes to drain at its rate: frames
        still in a netem qdisc's delay, a queue or a slow switch's ring when the senders are done would
        otherwise be booked as lost "inside switch" (a TCG guest at scale 10000: 3-6 frames per trial). At
        scale 20000 a 30 km ECN trial took 15.2 s to settle, its fast-CNP twin more than the 19.3 s the cap
        was without ``drain_s``. When it never settles, ``unsettled`` names the interfaces still moving."""
        cpu1 = self._cpu_now()
        if quiet_s > 0:
            self.settled_s = self._settle(quiet_s, drain_s)
        wall = cpu1["_wall"] - self._cpu0["_wall"]
        self._cpu = {name: {"cpu_s": round(t - self._cpu0[name], 3), "wall_s": round(wall, 3)}
                     for name, t in cpu1.items() if name in self._cpu0 and not name.startswith("_")}
        # processes that ran and ended inside the trial (the senders, tcpdump): this process' waited children
        self._cpu["ended children"] = {"cpu_s": round(cpu1["_children"] - self._cpu0["_children"], 3),
                                       "wall_s": round(wall, 3)}
        self._after = self._read()
        self._lost = self.losses.stop()
        return self

    def _settle(self, quiet_s: float, drain_s: float = 0.0) -> float | None:
        """Seconds until the interface counters stood still for ``quiet_s`` (None: they never did)."""
        import time

        from testbed.poll import poll

        elements, _wires = ifcounters.topology(self.rep)
        mine = {i for e in elements for i in e.intfs}   # the root namespace has other interfaces too

        def read() -> dict:
            return {k: v for k, v in ifcounters.snapshot(self.rep).items() if k in mine}

        t0 = time.monotonic()
        last = {"snap": read(), "at": t0}

        def quiet() -> bool:
            snap, now = read(), time.monotonic()
            if snap != last["snap"]:
                last.update(moved=sorted(k for k in snap if snap[k] != last["snap"].get(k)), snap=snap, at=now)
            return now - last["at"] >= quiet_s

        try:
            poll(quiet, timeout=3 * quiet_s + 10 + drain_s, interval=min(0.2, quiet_s / 4), what="frames in flight")
        except TimeoutError:
            self.unsettled = [str(k) for k in last.get("moved", [])][:20]
            return None   # traffic never stopped: the ledger reads what it finds and says where frames are
        return round(time.monotonic() - t0, 3)

    def own_cpu(self) -> dict:
        """{process: {cpu_s, wall_s}} of the run's own processes over the trial (link nodes: their stats)."""
        return dict(self._cpu)

    def link_stats(self) -> dict:
        """{link node: its stats over the trial only}."""
        return {name: accounting.stats_delta(self._before["links"].get(name), doc)
                for name, doc in self._after["links"].items() if doc}

    def evidence(self, dropped: dict) -> dict:
        """The ledger's inputs; ``dropped`` is :func:`testbed.p4rt.fabric_stats.drops` read after the trial."""
        name = {sw: self.rep.switch(sw).name for sw in self.clients}
        links = self.link_stats()
        counted = {name[sw]: n for sw, n in dropped["consumed_by_switch"].items()}
        generated = {name[sw]: n for sw, n in dropped["generated_by_switch"].items()}
        queued = {}
        for node, doc in links.items():
            dirs = doc.get("directions", {}).values()
            counted[node] = sum(d.get(k, 0) for d in dirs for k in _LINK_CONSUMED) + doc.get("rx_kernel_drops", 0)
            before = self._before["links"].get(node) or {}
            queued[node] = (sum(d.get("in_flight", 0) for d in dirs)
                            - sum(d.get("in_flight", 0) for d in before.get("directions", {}).values()))
        elements, wires = ifcounters.topology(self.rep)
        ledger = hops.hop_ledger(elements, wires, hops.delta(self._before["intf"], self._after["intf"]),
                                 counted, generated, queued)
        rings = {}
        for sw, after in self._after["rings"].items():
            d = ring_drops(self._before["rings"].get(sw), after)
            if d is None:
                rings = None
                break
            rings[sw] = sum(d.values())
        sizes = [ring_frames(doc) for doc in self._after["rings"].values()]
        return {"hops": ledger, "ring_drops": rings, "link_stats": links,
                "ring_frames_min": min(sizes) if sizes and None not in sizes else None, **self._lost}
