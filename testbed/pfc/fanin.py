"""N senders into one bottleneck, every hop a link core with PFC: the incast fixture (root glue).

::

    netns {p}S0 [{p}h0] --veth-- [{p}a0] L0 [{p}b0] --veth-- [{p}w0] --\\
      ...                                                               tc "switch" --> [{p}ws] --veth--
    netns {p}Sk [{p}hk] --veth-- [{p}ak] Lk [{p}bk] --veth-- [{p}wk] --/         [{p}ra] LR [{p}rb] --veth-- [{p}r0] netns {p}R

* Data: every ``w`` port's ingress is redirected (tc mirred) to ``ws``: the fan-in of a switch whose only
  egress is the bottleneck link LR. LR's a->b queue is where the incast builds.
* PFC: LR's PAUSE/XON leave by its upstream side (``ra``) and arrive at ``ws``; tc mirrors them to every
  ``w`` port, so each sender's link core receives them on its b side and holds that priority. This is a
  switch relaying a pause to all its ingress ports: right for an incast in which every ingress port feeds
  the congested egress (each real ingress port would cross its own xoff); a port that does not feed it
  would not be paused by a real switch, which this fixture does not model. LR's buffer stands for the
  switch's shared buffer, so its headroom is the sum of the ingress ports' (:func:`port_headroom`).
* The senders' link cores (L0..Lk) are the NICs: their queue is the host's memory (a large limit, an xoff
  never reached), and they honour PAUSE on their egress.

Traffic comes from ``linkcore gen`` (paced UDP of one DSCP) in each sender namespace. Everything is
recorded in the caller's :class:`~testbed.emu.registry.RunRegistry` before it exists.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from testbed.dilation import Dilation
from testbed.emu import ops
from testbed.emu.registry import RunRegistry
from testbed.errors import EmulationError
from testbed.links import core
from testbed.links.delayline import read_stats
from testbed.links.model import LinkParams
from testbed.links.wire import _repo_path, spawn_core, stop_delayline, wait_ready
from testbed.pfc.config import NIC_HEADROOM_BYTES, NIC_LIMIT_BYTES, NIC_XOFF_BYTES, NIC_XON_BYTES, PfcConfig
from testbed.pfc.headroom import headroom
from testbed.pfc.link import PRIO_COUNTERS, PfcPort, linkcore_args
from testbed.pfc.relay import relay_argv
from testbed.poll import poll

#: The compiled cores' wake-up: one sleep to WAKE_S before each deadline, then a spin (the default 1 ms early
#: + 100 us hops woke each vCPU ~10 times per deadline, and on this VM the host steals time from vCPUs that
#: wake often: interleaved, 3.2-28 % late with this against 14-41 % without, docs/pfc.md "Lateness").
WAKE_S = 150e-6



@dataclass(frozen=True)
class IncastParams:
    """One incast experiment (emulated units unless named real).

    Attributes:
        senders: number of sending hosts (N in N:1).
        scale: time dilation; the real line rate is ``rate_bps * scale``.
        rate_bps: emulated rate of every link (senders' NICs and the bottleneck).
        delay_s: emulated one-way delay of every link.
        limit_bytes: the bottleneck's tail-drop limit (lossy priorities; all with PFC off).
        pfc: the PFC block (thresholds, lossless priorities, DSCP map, a fixed headroom if it has one).
        pfc_on: False runs the same per-priority data path with no lossless priority (tail drop for all).
    """

    senders: int = 4
    scale: float = 1000.0
    rate_bps: float = 20e6
    delay_s: float = 1e-4
    limit_bytes: float = 100e3
    pfc: PfcConfig = PfcConfig()
    pfc_on: bool = True

    @property
    def real_rate_bps(self) -> float:
        return Dilation(self.scale).real_rate(self.rate_bps)

    def port_headroom(self) -> int:
        """Bottleneck headroom: one ingress port's (the formula, real units) times the ports feeding it."""
        if self.pfc.headroom_bytes is not None:
            return int(self.pfc.headroom_bytes)
        return self.senders * headroom(self.real_rate_bps, self.real_delay_s).total

    @property
    def real_delay_s(self) -> float:
        return Dilation(self.scale).real_time(self.delay_s)

    def reaction_allowance_s(self) -> float:
        """Emulated seconds of all senders at line rate the headroom absorbs beyond its frame and cable terms:
        the longest PFC reaction (crossing -> senders held) the bottleneck stays lossless through."""
        h = headroom(self.real_rate_bps, self.real_delay_s)
        fixed = self.senders * (h.crossing_frame + h.own_frame + h.pause_frame + h.cable + h.peer_frame)
        return (self.port_headroom() - fixed) / (self.senders * self.rate_bps / 8)


class FanIn:
    """The fixture above; build once, then :meth:`start` / :meth:`send` / :meth:`stop` per trial."""

    def __init__(self, run: RunRegistry, prefix: str, workdir: Path, senders: int):
        if not 1 <= senders <= 8:
            raise EmulationError(f"fan-in of {senders} senders: 1..8 supported")
        self.run, self.p, self.n = run, prefix, senders
        self.workdir = Path(workdir)
        self.procs: dict = {}
        self.stats_paths: dict = {}

    def _nodes(self):
        """(name, a interface, b interface) of every link core: L0..Lk, then LR."""
        p = self.p
        return [(f"L{i}", f"{p}a{i}", f"{p}b{i}") for i in range(self.n)] + [("LR", f"{p}ra", f"{p}rb")]

    def build(self) -> None:
        run, p = self.run, self.p
        for ns in [f"{p}S{i}" for i in range(self.n)] + [f"{p}R"]:
            run.add_netns(ns)
            for key in ("all", "default"):
                ops.run(ops.netns_exec_argv(["sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1"], ns),
                        what=f"disable IPv6 in {ns}", check=False)
        pairs = [(f"{p}h{i}", f"{p}a{i}", f"{p}S{i}", None) for i in range(self.n)]
        pairs += [(f"{p}b{i}", f"{p}w{i}", None, None) for i in range(self.n)]
        pairs += [(f"{p}ws", f"{p}ra", None, None), (f"{p}rb", f"{p}r0", None, f"{p}R")]
        for a, b, ns_a, ns_b in pairs:
            run.add_veth(a, b, ns_a=ns_a, ns_b=ns_b)
            for name, ns in ((a, ns_a), (b, ns_b)):
                if ns is None:
                    ops.run(["sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1"], what=f"IPv6 off on {name}",
                            check=False)
        for argv in switch_argv(p, self.n):
            ops.run(argv, what="program the tc fan-in switch")

    def start(self, params: IncastParams, seed: int = 1, core_name: str = "c") -> None:
        """Start the N + 1 link cores for one trial (zeroed counters); ``core_name`` c or python."""
        nic = LinkParams(rate_bps=params.rate_bps, delay_s=params.delay_s, limit=NIC_LIMIT_BYTES, limit_unit="bytes")
        bottleneck = LinkParams(rate_bps=params.rate_bps, delay_s=params.delay_s, limit=params.limit_bytes,
                                limit_unit="bytes")
        for i, (name, a, b) in enumerate(self._nodes()):
            link = bottleneck if name == "LR" else nic
            stats = self.workdir / f"{self.p}-{name}.json"
            log = self.workdir / f"{self.p}-{name}.log"
            stats.unlink(missing_ok=True)
            if name == "LR":
                port = PfcPort(params.pfc, params.real_rate_bps, params.port_headroom(), params.scale)
            else:
                nic_pfc = PfcConfig(priorities=params.pfc.priorities, xoff_bytes=NIC_XOFF_BYTES,
                                    xon_bytes=NIC_XON_BYTES, quanta=params.pfc.quanta,
                                    dscp_map=params.pfc.dscp_map)
                port = PfcPort(nic_pfc, params.real_rate_bps, NIC_HEADROOM_BYTES, params.scale)
            if params.pfc_on:
                which, argv = core.line_argv(a, b, link, stats, core=core_name, seed=seed + i, stats_interval_s=0.25,
                                             spin_s=WAKE_S if core_name == "c" else None, pfc=port)
            else:  # the same per-priority data path, no lossless priority (the compiled core only)
                which, argv = core.line_argv(a, b, link, stats, core="c", seed=seed + i, stats_interval_s=0.25,
                                             spin_s=WAKE_S)
                argv += linkcore_args(port.config, port.real_rate_bps, port.headroom_bytes, port.scale,
                                      lossless=False)
            if which != (core_name if params.pfc_on else "c"):
                raise EmulationError(f"link core {name}: wanted the {core_name} core, got {which}")
            if which == "c":
                argv += ["--wake-early", repr(WAKE_S)]
            proc = spawn_core(self.run, argv, log)
            self.procs[name], self.stats_paths[name] = proc, stats
            wait_ready(proc, stats, log, what=f"link core {name} ({a}<->{b})")

    def send(self, flows, seconds: float, size: int = 1000) -> list[dict]:
        """Run ``flows`` = [(sender index, tos, pps)] together for ``seconds``; returns each gen's report."""
        binary = str(core.build())
        procs = []
        for i, tos, pps in flows:
            argv = [binary, "gen", "--a", f"{self.p}h{i}", "--pps", repr(float(pps)), "--seconds", repr(float(seconds)),
                    "--size", str(int(size)), "--tos", str(int(tos))]
            procs.append(self.run.spawn(argv, netns=f"{self.p}S{i}", stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True))
        out = []
        for proc, (i, tos, pps) in zip(procs, flows, strict=True):
            stdout, stderr = proc.communicate(timeout=seconds + 30)
            if proc.returncode != 0:
                raise EmulationError(f"traffic source on {self.p}h{i} failed ({proc.returncode}): {stderr.strip()}")
            out.append({"sender": i, "tos": tos, "pps": pps, **json.loads(stdout)})
        return out

    def stuck_receiver(self, seconds: float, interval: float, priority: int = 3):
        """Start a receiver that sends PAUSE every ``interval`` s for ``seconds`` (then XON); returns the process
        once its first PAUSE is out.

        Why wait: the senders start right after, and a storm must meet frames queued behind it. The CI saw
        the watchdog trial declare no storm although the bottleneck was paused for 2.1 s: the storm's Python
        process had started after the one-second senders were done, so it paused an empty queue (the
        watchdog rightly needs queued frames).
        """
        argv = [sys.executable, "-m", "testbed.pfc.storm", "--intf", f"{self.p}r0", "--priority", str(priority),
                "--interval", repr(float(interval)), "--seconds", repr(float(seconds))]
        proc = self.run.spawn(argv, netns=f"{self.p}R", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": _repo_path()})
        ready, _, _ = select.select([proc.stdout], [], [], 30.0)
        line = proc.stdout.readline() if ready else ""
        if '"pausing"' not in line:
            proc.kill()
            err = proc.communicate(timeout=10)[1]
            raise EmulationError(f"the stuck receiver sent no PAUSE ({line.strip() or 'no output in 30 s'}): "
                                 f"{err.strip()[-300:]}")
        return proc

    def wait_drained(self, timeout: float = 60.0) -> None:
        """Until every link core holds no frame (queued, paused or waiting for its release)."""

        def drained() -> bool:
            docs = [read_stats(path) for path in self.stats_paths.values()]
            return all(d is not None and all(x.get("in_flight", 1) == 0 for x in d["directions"].values())
                       for d in docs)

        poll(drained, timeout=timeout, interval=0.1, what="the link cores to drain their queues")

    def stop(self) -> dict:
        """Stop every link core; returns {name: final stats}."""
        out = {}
        for name, proc in self.procs.items():
            out[name] = stop_delayline(proc, self.stats_paths[name], self.workdir / f"{self.p}-{name}.log")
        self.procs.clear()
        return out

    def receiver_packets(self) -> int:
        """Frames the receiver's interface got (veth rx counter)."""
        res = ops.run(ops.netns_exec_argv(["cat", f"/sys/class/net/{self.p}r0/statistics/rx_packets"], f"{self.p}R"),
                      what="read the receiver's counter")
        return int(res.stdout.strip())


def switch_argv(p: str, n: int) -> list[list[str]]:
    """tc commands of the fan-in switch: data from every ``w`` port to ``ws``; PFC from ``ws`` to all ``w``."""
    out = []
    ws = f"{p}ws"
    for i in range(n):
        w = f"{p}w{i}"
        out += [["tc", "qdisc", "add", "dev", w, "clsact"],
                ["tc", "filter", "add", "dev", w, "ingress", "protocol", "all", "prio", "1", "u32", "match", "u32",
                 "0", "0", "action", "mirred", "egress", "redirect", "dev", ws]]
    # anything else arriving at ws (nothing: the receiver is silent) would end in ws's own stack
    out += relay_argv(ws, [f"{p}w{i}" for i in range(n)])
    return out


def ledger(sources: list[dict], stats: dict, pfc: PfcConfig, pfc_on: bool, delivered: int) -> dict:
    """Per priority: sent, dropped where and why, delivered by the bottleneck; unaccounted must be 0.

    ``sources`` are :meth:`FanIn.send` reports; ``stats`` the link cores' final documents (a->b is the data
    direction of every node).
    """
    cfg = pfc
    prios: dict = {}
    for src in sources:
        p = cfg.priority_of(src["tos"] >> 2)
        prios.setdefault(p, {"sent": 0})["sent"] += src["sent"]
    for p, row in prios.items():
        nic = [stats[n]["directions"]["a>b"].get("priorities", {}).get(str(p), {}) for n in stats if n != "LR"]
        lr = stats["LR"]["directions"]["a>b"].get("priorities", {}).get(str(p), {})
        row["nic"] = {k: sum(d.get(k, 0) for d in nic) for k in PRIO_COUNTERS}
        row["bottleneck"] = {k: lr.get(k, 0) for k in PRIO_COUNTERS}
        drops = {f"{where}_{k}": row[where][k] for where in ("nic", "bottleneck")
                 for k in ("drop_tail", "drop_red", "drop_loss", "drop_pfc_headroom", "drop_pfc_watchdog")}
        row["dropped"] = sum(drops.values())
        row["drops"] = {k: v for k, v in drops.items() if v}
        row["delivered"] = row["bottleneck"]["forwarded_packets"]
        row["lost_between"] = row["nic"]["forwarded_packets"] - row["bottleneck"]["rx_packets"]
        row["unaccounted"] = row["sent"] - row["delivered"] - row["dropped"] - row["lost_between"]
        row["lossless"] = pfc_on and cfg.lossless(p)
    emulator = {n: {"rx_kernel_drops": s.get("rx_kernel_drops", 0), "emulator_late": s.get("emulator_late", 0),
                    "tx_errors": sum(d.get("tx_errors", 0) for d in s["directions"].values())}
                for n, s in stats.items()}
    bottleneck_tx = stats["LR"]["directions"]["a>b"].get("tx_packets", 0)
    return {"priorities": {str(p): prios[p] for p in sorted(prios)}, "emulator": emulator,
            "receiver_packets": delivered, "bottleneck_tx_packets": bottleneck_tx}


def pfc_counters(stats: dict) -> dict:
    """{node: {direction: its ``pfc`` block}} of the nodes that ran PFC (pause frames, paused time)."""
    return {n: {d: x["pfc"] for d, x in s["directions"].items() if "pfc" in x} for n, s in stats.items()}


def reaction(stats: dict) -> dict:
    """The emulator's PFC reaction lag (emulated seconds): the bottleneck's PAUSE leaving after the crossing
    frame's arrival (tx lag) plus a sender's core taking the PAUSE after its arrival (rx lag), worst cases."""
    lr = stats["LR"]["directions"]["a>b"].get("pfc", {})
    nics = [s["directions"]["a>b"].get("pfc", {}) for n, s in stats.items() if n != "LR"]
    tx = lr.get("tx_lag", {})
    rx_max = max((x.get("rx_lag", {}).get("max_s", 0.0) for x in nics), default=0.0)
    rx_n = sum(x.get("rx_lag", {}).get("count", 0) for x in nics)
    rx_mean = (sum(x.get("rx_lag", {}).get("mean_s", 0.0) * x.get("rx_lag", {}).get("count", 0) for x in nics)
               / rx_n if rx_n else 0.0)
    return {"tx_lag_max_s": tx.get("max_s", 0.0), "tx_lag_mean_s": tx.get("mean_s", 0.0),
            "rx_lag_max_s": rx_max, "rx_lag_mean_s": rx_mean, "worst_s": tx.get("max_s", 0.0) + rx_max}


def started_while_paused(records, params: IncastParams, priority: int = 3, margin_s: float = 5e-4) -> dict:
    """Which data frames a sender NIC started while its ``priority`` was paused, from a capture at its
    switch-side interface (``b``: data frames out, PFC frames in, kernel stamps; :func:`read_pcap` records).

    A PFC frame stamped ``t`` acts at ``t + delay`` (the cable back to the sender), replayed through
    :class:`~testbed.pfc.state.PfcEgress`; a data frame captured at ``c`` started at ``c - len/rate - delay``
    if it was sent on time (later if it was sent late, never earlier). So that lateness cannot move a frame
    into a pause, frames less than 0.8 frame times from a neighbour (a catch-up burst after a stall: their start
    is unknown) are skipped, and a frame counts as ``in`` a pause only from ``margin_s`` after it began (the
    model may take a PAUSE up to its reaction lag late). Pure.

    Returns:
        ``{"pfc_frames", "paused_s", "skipped_burst", "frames": {prio: {"in": n, "out": n}}}``: ``in`` =
        started while ``priority`` was paused; ``paused_s`` = the union of pauses, as the NIC's ``paused_s``.
    """
    from testbed.pfc.state import PfcEgress
    from testbed.pfc.wire import decode, priority_of

    egress = PfcEgress(params.pfc, params.real_rate_bps, Dilation(params.scale))
    Bps = params.rate_bps / 8
    pauses, data = [], []
    for ts_ns, raw, length in records:
        t = ts_ns * 1e-9
        frame = decode(raw)
        if frame is not None:
            pauses.append((t + params.delay_s, frame))
        else:
            data.append((t, priority_of(raw, params.pfc), length))
    data.sort(key=lambda x: x[0])
    pauses.sort(key=lambda x: x[0])
    frames: dict = {}
    skipped = k = 0
    for i, (c, prio, length) in enumerate(data):
        gap = 0.8 * length / Bps
        if (i and c - data[i - 1][0] < gap) or (i + 1 < len(data) and data[i + 1][0] - c < gap):
            skipped += 1
            continue
        start = c - length / Bps - params.delay_s
        while k < len(pauses) and pauses[k][0] <= start:
            egress.receive(*pauses[k])
            k += 1
        since = egress.paused_since[priority]
        inside = egress.paused(start, priority) and since is not None and start - since >= margin_s
        row = frames.setdefault(prio, {"in": 0, "out": 0})
        row["in" if inside else "out"] += 1
    for t, frame in pauses[k:]:
        egress.receive(t, frame)
    end = max([t for t, _ in pauses[-1:]] + [c for c, _, _ in data[-1:]], default=0.0)
    return {"pfc_frames": len(pauses), "paused_s": egress.paused_time(end, priority),
            "skipped_burst": skipped, "frames": frames}


def run_trial(fan: FanIn, params: IncastParams, flows, seconds: float, seed: int = 1,
              capture: Path | None = None, storm_s: float | None = None, core_name: str = "c") -> dict:
    """One incast: start the cores, send ``flows``, drain, stop; the ledger, PFC counters and validity.

    ``capture``: also record the bottleneck's PFC frames (tcpdump at ``ws``) into this pcap.
    ``core_name``: ``c`` or ``python`` (the Python delay line; it reports no PFC reaction lag).
    ``storm_s``: the receiver is stuck for this long from the start, refreshing PAUSE on priority 3 every
    quarter of its pause time (the bottleneck's egress is held; its watchdog, if any, must break it).
    """
    from testbed.emu.capture import tcpdump, tcpdump_argv
    from testbed.emu.health import CpuWatch

    fan.start(params, seed=seed, core_name=core_name)
    stuck = None
    try:
        with ExitStack() as stack:
            if capture is not None:  # the PFC frames the bottleneck sends upstream, at the switch port ws
                argv = tcpdump_argv(f"{fan.p}ws", capture, ["ether", "proto", "0x8808"], buffer_kib=8192)
                stack.enter_context(tcpdump(lambda a, log: fan.run.spawn(a, log=log), argv,
                                            capture.with_suffix(".log"), "the switch port"))
            before = fan.receiver_packets()
            with CpuWatch({name: p.pid for name, p in fan.procs.items()}) as cpu:
                if storm_s is not None:
                    pause_s = 0xFFFF * 512 / params.real_rate_bps * params.scale
                    stuck = fan.stuck_receiver(storm_s, pause_s / 4)
                sources = fan.send(flows, seconds)
                if stuck is not None:
                    stuck.communicate(timeout=storm_s + 30)
                fan.wait_drained()
    finally:
        stats = fan.stop()
    led = ledger(sources, stats, params.pfc, params.pfc_on, fan.receiver_packets() - before)
    react = reaction(stats)
    allowance = params.reaction_allowance_s() if params.pfc_on else None
    emu = led["emulator"]
    late = sum(e["emulator_late"] for e in emu.values())
    frames = sum(sum(d.get("tx_packets", 0) for d in s["directions"].values()) for s in stats.values())
    checks = {"no_emulator_loss": all(e["rx_kernel_drops"] == 0 and e["tx_errors"] == 0 for e in emu.values()),
              "late_fraction_ok": frames > 0 and late / frames <= 0.01,
              "all_accounted": all(r["unaccounted"] == 0 for r in led["priorities"].values()),
              "delivered_equals_receiver": led["bottleneck_tx_packets"] == led["receiver_packets"]}
    # machine CPU is reported, not a check: the link cores busy-wait before releases by design, so a busy
    # machine is the normal state; the direct evidence of an emulator falling behind is above (late
    # frames, socket drops, the PFC reaction lag)
    if allowance is not None:
        checks["reaction_within_headroom"] = react["worst_s"] <= allowance
    return {"params": {"senders": params.senders, "scale": params.scale, "rate_bps": params.rate_bps,
                       "real_rate_bps": params.real_rate_bps, "delay_s": params.delay_s,
                       "limit_bytes": params.limit_bytes, "pfc_on": params.pfc_on, "pfc": params.pfc.to_dict(),
                       "headroom_bytes": params.port_headroom(), "reaction_allowance_s": allowance},
            "flows": sources, "ledger": led, "pfc": pfc_counters(stats), "reaction": react,
            "emulator_late": late, "frames": frames, "late_fraction": late / frames if frames else None,
            "host_steal": cpu.summary()["host_steal"], "cpu": cpu.summary(), "checks": checks, "storm_s": storm_s, "valid": all(checks.values()),
            "series": {n: s["directions"]["a>b"].get("pfc_series", []) for n, s in stats.items()},
            "stats": stats}
