"""Paced UDP streams of one priority across a running replica, and what its link nodes counted (root glue).

Each stream is the project's one probe (:mod:`testbed.links.probe`): a receiver in the destination's
namespace (bound before its sender starts), a paced, numbered sender in the source's. Every link node is
read before and after (:mod:`testbed.pfc.counters`), so a trial reports, per stream, what was sent, received
and lost, per link direction what was dropped and why, PAUSE sent and received, time held, and what is still
queued at the end. Used by the scenarios ``pfc_fabric`` and ``pfc_deadlock``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from testbed.emu.capture import tcpdump, tcpdump_argv
from testbed.errors import EmulationError
from testbed.pfc.counters import (
    attribute,
    delays_ms,
    delta_all,
    direction_counters,
    fold_switches,
    ledger,
    switch_delta,
)

#: UDP payload of every stream; the frame a link node queues is 42 bytes more.
PAYLOAD = 1000
FRAME = PAYLOAD + 42
BASE_PORT = 5301


def _names(rep) -> dict:
    """link node name -> {"a>b": "u>v", "b>a": "v>u"} (the plan's ends)."""
    return {e.via: {"a>b": f"{e.u}>{e.v}", "b>a": f"{e.v}>{e.u}"} for e in rep.plan.links if e.via}


def snapshot(rep, priority: int) -> dict:
    """``{link node: {"u>v": counters}}`` as of now (each node rewrites its stats on request)."""
    names = _names(rep)
    out = {}
    for dl in rep.link_nodes().values():
        counters = direction_counters(dl.fresh_stats() or {}, priority)
        out[dl.name] = {names[dl.name][d]: c for d, c in counters.items()}
    return out


class TrialCount:
    """What a replica's link nodes and OVS counted over one trial, and the emulator's CPU meanwhile (root glue;
    shared by :func:`run_streams` and :func:`testbed.rdma.fabric_flows.run_flows`)::

        with TrialCount(rep, priority) as count:     # every link node read, OVS's loss counters, CpuWatch on
            ... the trial's traffic ...
        count.hops, count.emulator, count.cpu, count.stats, count.attributed(ledger)

    ``hops``: per link node and direction, the counters of ``priority`` over the trial; ``emulator``: frames
    lost inside OVS and the kernel backlog; ``switches``: per BMv2 switch, fabric.p4's drops by reason, its
    queues' tail drops and its PFC frames per port (:func:`bmv2_snapshot`); ``stats``: the nodes' stats
    documents (evidence for :func:`judge`). Nothing is read after a trial that raised.
    """

    def __init__(self, rep, priority: int):
        from testbed.emu.health import CpuWatch, emulator_processes

        self.rep, self.priority = rep, priority
        self._watch = CpuWatch(emulator_processes(rep))
        self._bmv2 = [s.node for s in rep.plan.switches if s.kind == "bmv2"]

    def __enter__(self) -> "TrialCount":
        self._before = snapshot(self.rep, self.priority)
        self._ovs_before, self._ovs_args = _ovs_snapshot(self.rep)
        self._sw_before = bmv2_snapshot(self.rep, self._bmv2, self.priority)
        self._watch.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._watch.__exit__(*exc)
        if exc[0] is not None:
            return
        self.hops = delta_all(self._before, snapshot(self.rep, self.priority))
        self.emulator = _ovs_losses(self._ovs_before, self._ovs_args)
        self.switches = switch_delta(self._sw_before, bmv2_snapshot(self.rep, self._bmv2, self.priority))
        self.cpu = self._watch.summary()
        self.stats = {dl.name: dl.stats() for dl in self.rep.link_nodes().values()}

    def attributed(self, led: dict) -> dict:
        """``led`` with the BMv2 switches' modelled drops in it, and its unaccounted frames split into lost
        inside the emulator (OVS, the kernel backlog, a BMv2 drop no queue models) and unexplained."""
        strange = fold_switches(led, self.switches)
        led.update(attribute(led, {**self.emulator, **strange}))
        return led


def bmv2_snapshot(rep, switches, priority: int) -> dict:
    """``{switch: {"drops": {reason: n}, "tail": {port: queued - dequeued}, "pfc_pause_sent": {port: n},
    ...}}`` of the replica's BMv2 ``switches`` now (fabric.p4's counters over Thrift). ``tail`` counts what a
    queue still holds as well as what it dropped: read it once the queues drained (the trials' receivers
    stop only after seconds of silence)."""
    from testbed.p4rt import entries as E

    out = {}
    for sw in switches:
        ports = [p.port for p in rep.plan.switch(sw).ports]
        with rep.switch(sw).client() as c:
            doc = {"drops": {k: c.counter_read("drops", i).packets for k, i in E.DROP_REASONS.items()},
                   "tail": {p: c.counter_read("to_port", p).packets - c.counter_read("from_queue", p).packets
                            for p in ports}}
            for name in E.PFC_COUNTERS:
                doc[name] = {p: c.counter_read(name, p).packets for p in ports}
            # a state, not a counter: the bytes fabric.p4 still accounts per ingress port (0 once drained)
            doc["pfc_held_bytes"] = {p: c.register_read("pfc_bytes", p * 8 + priority) for p in ports}
        out[str(sw)] = doc
    return out


def run_streams(rep, flows, tos: int, priority: int, seconds: float, pps: float, workdir: Path, label: str,
                idle: float = 4.0, bin_s: float = 0.25, capture: tuple | None = None) -> dict:
    """Run ``flows`` = [(src, dst) or (src, dst, own pps), ...] together for ``seconds`` at ``pps`` each
    (unless a flow gives its own), TOS ``tos``.

    The receivers stop after ``idle`` seconds without a datagram (queues drained, or frozen). Returns the
    streams (``"src>dst"``: sent, received, lost, ``delivered_per_bin``: datagrams per ``bin_s`` from the
    start, ``delay_ms``: one-way delay percentiles), the link directions' counters over the trial (``hops``),
    the ledger, CPU and the nodes' stats.
    ``capture`` = (interface in the machine's namespace, pcap): the PFC frames seen there, for the whole trial.
    """
    from testbed.links.probe import wait_bound

    probe = [sys.executable, "-m", "testbed.links.probe"]
    kw = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    flows = [(f[0], f[1], float(f[2]) if len(f) > 2 else pps) for f in flows]
    recv, ready, files = {}, {}, {}
    for i, (src, dst, _) in enumerate(flows):
        key = f"{src}>{dst}"
        files[key] = (workdir / f"{label}-{src}-{dst}-send.json", workdir / f"{label}-{src}-{dst}-recv.json")
        flag = workdir / f"{label}-{src}-{dst}.ready"
        flag.unlink(missing_ok=True)
        recv[key] = rep.popen(dst, probe + ["recv", "--port", str(BASE_PORT + i), "--idle", repr(idle),
                                            "--timeout", repr(seconds * 4 + 30 + 3 * idle), "--ready", str(flag), "--out",
                                            str(files[key][1])], **kw)
        ready[flag] = (recv[key], f"udp probe receiver {key}")
    wait_bound(ready)
    send = {}
    with TrialCount(rep, priority) as count, ExitStack() as stack:
        start = time.time()
        if capture is not None:
            intf, pcap = capture
            argv = tcpdump_argv(intf, Path(pcap), ["ether", "proto", "0x8808"], buffer_kib=8192)
            stack.enter_context(tcpdump(lambda a, log: rep.run.spawn(a, log=log), argv, Path(pcap).with_suffix(".log"),
                                        f"switch port {intf}"))
        for i, (src, dst, rate) in enumerate(flows):
            key = f"{src}>{dst}"
            send[key] = rep.popen(src, probe + ["send", "--dst", rep.ip(dst), "--port", str(BASE_PORT + i),
                                                "--duration", repr(seconds), "--pps", repr(rate), "--size",
                                                str(PAYLOAD), "--tos", str(tos), "--out", str(files[key][0])], **kw)
        for key, p in send.items():
            if p.wait(timeout=seconds + 60) != 0:
                raise EmulationError(f"sender {key} failed: {p.stderr.read().decode()[-300:]}")
        for key, p in recv.items():   # the capture runs until the queues drained (the receivers' idle end)
            if p.wait(timeout=seconds * 4 + 60 + 3 * idle) != 0:
                raise EmulationError(f"receiver {key} failed: {p.stderr.read().decode()[-300:]}")
    streams = {}
    for key in files:
        sent = json.loads(files[key][0].read_text())["sent"]
        got = json.loads(files[key][1].read_text())
        bins: list = []
        for rx in got["rx_ns"]:
            k = max(0, int((rx / 1e9 - start) // bin_s))
            bins.extend([0] * (k + 1 - len(bins)))
            bins[k] += 1
        received = len(set(got["seq"]))
        streams[key] = {"sent": sent, "received": received, "lost": sent - received, "delivered_per_bin": bins,
                        "delay_ms": delays_ms(got["tx_ns"], got["rx_ns"])}
    led = count.attributed(ledger(streams, count.hops))
    return {"label": label, "tos": tos, "priority": priority, "seconds": seconds, "pps_per_stream": pps,
            "bin_s": bin_s, "streams": streams, "hops": count.hops, "switches": count.switches, "ledger": led,
            "cpu": count.cpu,
            "stats": count.stats}


def judge(trial: dict, reasons=()) -> dict:
    """The trial's emulator health (:func:`testbed.emu.runhealth.assess`) from its CPU, its link nodes' stats
    (taken out of the trial: they are evidence, not results), its ledger's losses and the scenario's own
    ``reasons`` to distrust it; sets ``valid``."""
    from testbed.emu.runhealth import assess

    led = trial["ledger"]
    verdict = assess(cpu=trial["cpu"], link_stats=trial.pop("stats"), unaccounted=led["unaccounted"],
                     lost_inside=led["lost_inside_emulator"], reasons=[*reasons, *_loss_reasons(led)])
    trial["valid"] = verdict["emulator_ok"]
    return verdict


def _loss_reasons(led: dict) -> list[str]:
    """Why a trial's frames do not add up, for its health verdict: lost inside the emulator, or unexplained."""
    out = []
    if led.get("lost_inside_emulator"):
        out.append(f"{led['lost_inside_emulator']} datagrams lost inside OVS's userspace datapath or the kernel "
                   f"backlog (inferred: {led['emulator_losses']})")
    if led["unaccounted"] > 0:
        out.append(f"{led['unaccounted']} datagrams neither received, dropped by a modelled queue nor held")
    elif led["unaccounted"] < 0:
        out.append(f"{-led['unaccounted']} more frames delivered than sent: flooded or duplicated on the way")
    return out


def _ovs_snapshot(rep):
    """OVS's own loss counters before a trial (testbed.emu.ovsloss), and how to read them again."""
    from testbed.emu import ovsloss
    from testbed.emu.health import ovs_pid

    ports, edge = ovsloss.switch_ports(rep.plan)
    pid = ovs_pid()
    return ovsloss.snapshot(ports, edge, pid), (ports, edge, pid)


def _ovs_losses(before: dict, args) -> dict:
    """Frames lost inside ovs-vswitchd and the kernel's backlog since ``before``."""
    from testbed.emu import ovsloss

    after = ovsloss.snapshot(*args)
    out = ovsloss.losses(before, after)
    out["softnet_backlog"] = after["softnet_dropped"] - before["softnet_dropped"]
    return out
