"""Collective jobs on a running replica (root glue): one rank process per host, in the host's namespace.

    CollectiveFabric(G, link_rate_bps=10e6, out_dir=...)           context manager
        registry -> [os-ken controller when the fabric has several paths] -> plan (links: rates on HTB,
        scale = real host-link rate / link_rate_bps) -> Replica -> ARP/paths warmed by pings
      .run([JobRun(job, hosts), ...])  -> {"jobs": [...], "links": [...], "health": {...}}
        every job's rank processes start at once (python -m testbed.collective.rank); a start barrier
        over all of them makes concurrent jobs really overlap; switch port counters before and after;
        machine CPU and ovs-vswitchd sampled; host UDP buffer overflows counted; with ``sample=host``, that
        rank's first RoCEv2 frames captured and checked as ``roce check --expect-ect`` (``data_check``);
        with ``send_buffer``, ovs-vswitchd's shared send socket raised for the run and restored
        (testbed.emu.ovssndbuf; the health block's ``ovs_send_buffer_raised``)

What each job runs is data (:class:`JobRun`): a size sweep of one collective, or a trace. The figures
come from the rank reports through :mod:`testbed.collective.report` (pure).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from testbed import failures as F
from testbed.collective import report as R
from testbed.console import console
from testbed.emu.cpustat import load_average
from testbed.errors import EmulationError
from testbed.poll import poll
from testbed.roce.sample import sample_line

RANK = [sys.executable, "-m", "testbed.collective.rank"]
#: the plan's QP timeout is the real fabric's dilated by scale (minutes at scale 10^4): a run caps it,
#: and any timeout that fires is reported (the run is lossless by construction, so it is the emulator's)
QP_TIMEOUT_CAP_S = 1.0
#: packets in flight per QP: a few BDPs of a host link (no delay is emulated), small enough that an
#: n-to-1 step (all-to-all) fits the switch queues
WINDOW = 32
#: frames all the QPs sending into one host may have in flight together: ovs-vswitchd (userspace) sends
#: into every port of every bridge through ONE packet socket, charged for each frame until the port's HTB
#: sends it, whose send buffer (net.core.wmem_default, 208 KiB) holds ~92 frames for the whole fabric;
#: beyond that OVS frees frames uncounted (measured: testbed.emu.ovsloss, docs/collectives.md). Per-QP
#: windows shrink to fit; an 8-rank all-to-all still overflows it (the ledger names those frames)
INCAST_PACKETS = 64
MIN_WINDOW = 8
#: a ring's one QP into each host when the run raised ovs-vswitchd's send buffer: 32 frames (16 beyond
#: the last acknowledgement request) are less than the round trip of a ring hop across 4-6 links each
#: storing and forwarding at the emulated rate (0.87 ms a frame at 10 Mbit/s) plus the OVS hops and the
#: endpoints' turn-around, so the QP idled and the ring's coupling spread that to every link (measured,
#: docs/collectives.md "Where the ring's time went"). Without the raised buffer, 128 lost frames in the
#: socket (ECMP collisions queue at switch ports), so rings keep WINDOW there
RING_WINDOW = 128


def check_send_buffer(plan) -> None:
    """Refuse ``--ovs-send-buffer`` on a replica without an Open vSwitch switch on the userspace datapath:
    the kernel datapath (and BMv2) send through no shared socket of ovs-vswitchd."""
    from testbed.emu.ovssndbuf import OPTION
    from testbed.errors import SpecError

    kinds = sorted({f"{s.kind} {s.datapath or ''}".strip() for s in plan.switches})
    if not any(s.kind == "ovs" and s.datapath == "user" for s in plan.switches):
        raise SpecError(OPTION, f"applies to Open vSwitch's userspace datapath (netdev) only; this replica's "
                                f"switches are {', '.join(kinds)}, which have no shared send socket: leave it out")


def qp_window(window: int, fan_in: int, send_buffer_raised: bool) -> int:
    """Packets in flight per QP: ``window``, shrunk so that ``fan_in`` QPs into one host stay within
    :data:`INCAST_PACKETS`; a ring's (fan-in 1) raised to :data:`RING_WINDOW` when the send buffer is."""
    if fan_in == 1 and send_buffer_raised:
        return max(window, RING_WINDOW)
    return max(MIN_WINDOW, min(window, INCAST_PACKETS // fan_in))


def fan_in_of(job) -> int:
    """How many peers may send to one rank at once: n - 1 for all-to-all, 2 for a tree, 1 for rings."""
    n = len(job.hosts)
    if job.trace is not None:
        return n - 1
    kinds = {(r.get("collective"), r.get("algorithm")) for r in job.runs}
    if any(c == "all_to_all" for c, _ in kinds):
        return n - 1
    if any(a == "tree" for _, a in kinds):
        return 2
    return 1


@dataclass(frozen=True)
class JobRun:
    """One job: its hosts in rank order and what it runs (``runs`` of the rank config, or ``trace``)."""

    name: str
    hosts: tuple
    runs: tuple = ()
    trace: dict | None = None
    iters: int = 1
    warmup: int = 0
    chunks: int = 1
    seed: int = 1
    extra: dict = field(default_factory=dict)


def multipath(G) -> bool:
    return not nx.is_tree(G)


def read_counters(intfs) -> dict:
    """{(intf, 'tx'|'rx'): bytes} of switch interfaces (they live in the machine's namespace)."""
    out = {}
    for intf in intfs:
        for way in ("tx", "rx"):
            try:
                out[(intf, way)] = int(Path(f"/sys/class/net/{intf}/statistics/{way}_bytes").read_text())
            except (OSError, ValueError):
                out[(intf, way)] = 0
    return out


class CollectiveFabric:
    """A replica for collective jobs. ``link_rate_bps`` is the emulated rate of the fastest host link; the
    scale follows from it unless given (host links slowed to a rank's NIC rate keep the fabric's scale)."""

    def __init__(self, G, link_rate_bps: float, out_dir: Path, name: str = "collective", window: int = WINDOW,
                 scale: float | None = None, send_buffer: int | None = None):
        self.G, self.rate, self.out_dir, self.name = G, float(link_rate_bps), Path(out_dir), name
        self.window = window
        #: bytes of ovs-vswitchd's send buffer during each run (testbed.emu.ovssndbuf); None: left alone
        self.send_buffer = send_buffer
        from testbed.collective.experiment import host_link_rate

        self.scale = scale if scale is not None else host_link_rate(G) / self.rate
        self.run_reg = self.rep = self.ctl = self.plan = None

    def __enter__(self) -> "CollectiveFabric":
        from testbed.doctor import plan_capabilities
        from testbed.emu import Replica, RunRegistry
        from testbed.plan import Overrides, plan_replica

        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.run_reg = RunRegistry(self.name).__enter__()
        try:
            self.plan = plan_replica(self.G, plan_capabilities(),
                                     Overrides(scale=self.scale, links="rates", static_arp=not multipath(self.G)))
            if self.send_buffer is not None:
                check_send_buffer(self.plan)
            if multipath(self.G):
                from controllers.launch import start_controller

                self.ctl = start_controller(self.run_reg, self.G, self.out_dir, lldp_interval=0)
            self.rep = Replica(self.plan, controller=self.ctl.address if self.ctl else None, run=self.run_reg,
                               out_dir=self.out_dir, name=self.name).__enter__()
            if self.ctl:
                self.ctl.wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.rep is not None:
                self.rep.__exit__(None, None, None)
        finally:
            self.rep = None
            if self.run_reg is not None:
                self.run_reg.__exit__(None, None, None)
                self.run_reg = None

    def warm(self, hosts) -> None:
        """One ping between every pair of ``hosts`` (ARP, controller-learned paths) before timing."""
        hosts = list(hosts)
        for a in hosts:
            targets = " ".join(self.rep.ip(b) for b in hosts if b != a)
            self.rep.host(a).cmd(f"for t in {targets}; do ping -c1 -W2 -q $t >/dev/null; done")

    def drops(self, ports) -> dict:
        """Drops counted by the switch ports' qdiscs and interfaces (machine namespace; ``ports``: every
        switch port, both ends of a fabric link), every host's, Open vSwitch's own per-port drops (dpctl/show
        repeats a system port's interface drops: those are taken off), and the datapath's lost upcalls
        (machine-wide: shared). A veth whose peer's backlog was full counts the frame as its tx_dropped,
        so the kernel backlog's drops (softnet) are in these already."""
        def ns_text(cmd, host=None):
            if host is None:
                return subprocess.run(cmd, capture_output=True, text=True).stdout
            return self.rep.host(host).cmd(" ".join(cmd))

        links = ns_text(["ip", "-s", "-j", "link", "show"])
        kernel = R.counted_drops(ns_text(["tc", "-s", "-j", "qdisc", "show"]), links, set(ports))
        for h in self.plan.layout.hosts:
            kernel += R.counted_drops(ns_text(["tc", "-s", "-j", "qdisc", "show"], h.node),
                                      ns_text(["ip", "-s", "-j", "link", "show"], h.node))
        dpctl = ns_text(["ovs-appctl", "dpctl/show", "-s"])
        return {"kernel": kernel, "ovs_ports": R.ovs_port_drops(dpctl, set(ports)) - R.counted_drops("[]", links, set(ports)),
                "ovs_upcalls_lost": R.upcalls_lost(dpctl)}

    def qp_config(self, host) -> dict:
        ep = self.plan.endpoint(host)
        return {"mtu": 1024, "window": self.window, "timeout_s": min(ep.emulated_qp_timeout_s, QP_TIMEOUT_CAP_S),
                "plan_timeout_s": ep.emulated_qp_timeout_s, "dcqcn": ep.emulated_dcqcn}

    def data_sample(self, folder: Path, host: str):
        """tcpdump of ``host``'s first :data:`~testbed.roce.sample.DATA_SAMPLE_FRAMES` RoCEv2 frames, both
        directions at its host link, whole (``data-<host>.pcap``): the one capture helper, as a context."""
        from testbed.emu.capture import tcpdump, tcpdump_argv
        from testbed.roce.sample import DATA_SAMPLE_FRAMES, ROCE_FILTER

        nbr = next(iter(self.G.neighbors(host)))
        argv = tcpdump_argv(self.rep.intf_name(host, nbr), folder / f"data-{host}.pcap", [ROCE_FILTER],
                            buffer_kib=4096, count=DATA_SAMPLE_FRAMES)
        return tcpdump(lambda a, log: self.rep.popen(host, a, stdout=log.open("w"),  # noqa: SIM115
                                                     stderr=subprocess.STDOUT),
                       argv, folder / f"tcpdump-data-{host}.log", f"{host}-{nbr}")

    def sample_check(self, folder: Path, host: str) -> dict:
        """:meth:`data_sample`'s pcap checked as ``roce check --expect-ect --cut-at``, at the plan's emulated
        CNP interval and the dilated resend gap, capped at the QP timeout the ranks run with."""
        from testbed.roce.sample import check_sample, retx_gap_for

        dcqcn = self.plan.endpoint(host).emulated_dcqcn or {}
        return check_sample(folder / f"data-{host}.pcap", dcqcn.get("cnp_interval", 0.0),
                            retx_gap_for(self.scale, self.qp_config(host)["timeout_s"]))

    def run(self, jobs: list[JobRun], tag: str, timeout: float = 600.0, failures: list | None = None,
            sample: str | None = None) -> dict:
        """Run ``jobs`` concurrently; returns per-job figures, per-link utilisation and health.

        ``failures``: :func:`testbed.failures.parse` events, executed after the start barrier
        through :class:`testbed.emu.failctl.FabricControl` (the paths ``testbed fail`` uses); whatever they leave failed is
        restored when the jobs end. QP timeouts inside the failure windows are reported, not a fault.
        ``sample``: a rank's host whose RoCEv2 frames are sampled (:meth:`data_sample`) and checked after
        the run as ``roce check --expect-ect`` (:meth:`sample_check`): the result's ``data_check``."""
        folder = self.out_dir / tag
        (folder / "start").mkdir(parents=True, exist_ok=True)
        all_hosts = [h for j in jobs for h in j.hosts]
        if len(set(all_hosts)) != len(all_hosts):
            raise EmulationError("two ranks on one host: every rank needs its own host (one RoCE device each)")
        from testbed.emu import ovssndbuf

        lever = ovssndbuf.Raised(self.send_buffer) if self.send_buffer is not None else None
        try:    # raised before the first counter is read, restored after the last, every way out
            with lever or nullcontext():
                m = self._measure(jobs, folder, all_hosts, timeout, failures, sample)
        finally:
            if lever and lever.record["applied"]:
                style = "dim" if lever.record.get("restored") is not False else "red"
                console.print(f"[{style}]{tag}: {ovssndbuf.line(lever.record)}[/{style}]")
        drops = {k: m["drops_after"][k] - m["drops_before"][k] for k in m["drops_after"]}
        ovs_before, ovs_after, failed = m["ovs_before"], m["ovs_after"], m["failed"]
        from testbed.emu import ovsloss

        emulator = {"losses": ovsloss.losses(ovs_before, ovs_after), "edge": ovsloss.edge_frames(ovs_before, ovs_after),
                    "send_socket": ovs_after["send_socket"],
                    "kernel_backlog": ovs_after["softnet_dropped"] - ovs_before["softnet_dropped"]}
        wall = m["wall"]
        out_jobs, all_reports = self._collect(jobs, folder)
        span = max(j["end"] for j in out_jobs) - min(j["start"] for j in out_jobs)
        links = R.link_usage(R.directed_links(self.plan), m["before"], m["after"], span)
        health = self._health(out_jobs, all_reports, m["cpu"], m["lost"], drops, failed, wall, emulator)
        health["ovs_send_buffer_raised"] = lever.record if lever else "not applied"
        jcts = ", ".join(f"{j['name']} JCT {j['jct_s']:.2f}s" for j in out_jobs)
        console.print(f"[dim]{tag}: {jcts}; "
                      f"emulator {'ok' if health['ok'] else 'UNHEALTHY: ' + '; '.join(health['reasons'])}[/dim]")
        result = {"jobs": out_jobs, "links": links, "health": health, "span_s": span}
        if sample is not None:
            result["data_check"] = self.sample_check(folder, sample)
            console.print(f"[dim]{tag}: {sample_line(result['data_check'])}[/dim]")
        if failed is not None:
            result["failures"] = failed
            if failed["error"]:
                raise EmulationError(f"failure schedule: {failed['error']} (the fabric was restored; results in "
                                     f"{folder})")
        return result

    def _measure(self, jobs: list[JobRun], folder: Path, all_hosts: list, timeout: float, failures, sample) -> dict:
        """The ranks run between two reads of every counter: ``before``/``after`` (link bytes),
        ``drops_before``/``drops_after``, ``ovs_before``/``ovs_after`` (:func:`testbed.emu.ovsloss.snapshot`),
        ``cpu``, ``lost`` (:class:`~testbed.emu.health.LossWatch`), ``failed`` (the failure driver's), ``wall``."""
        from testbed.emu import ovsloss
        from testbed.emu.health import CpuWatch, LossWatch, ovs_pid

        capture = ExitStack()   # the data sample: from before the sampled rank's QPs start to its count
        if sample is not None:
            capture.enter_context(self.data_sample(folder, sample))
        with capture:
            # every counter is read before the ranks start: a frame lost before the first read would be
            # counted by the ranks and by no drop counter
            intfs = sorted({x[2] for x in R.directed_links(self.plan)})
            ports, edge = ovsloss.switch_ports(self.plan)
            pid = ovs_pid()
            losses = LossWatch(self.rep, all_hosts, [pid] if pid else []).start()
            before, drops_before = read_counters(intfs), self.drops(ports)
            ovs_before = ovsloss.snapshot(ports, edge, pid)
            procs = self._start_ranks(jobs, folder, timeout, failures)
            t0 = time.time()
            chaos = self.failure_driver(failures, folder / "start", len(procs), timeout) if failures else None
            try:
                with CpuWatch({"ovs-vswitchd": pid} if pid else {}) as cpu, backlog_watch(pid) as backlog:
                    poll(lambda: all(p.poll() is not None for _, _, _, p, _ in procs), timeout=timeout + 120,
                         interval=0.2, what=f"rank processes of {', '.join(j.name for j in jobs)}")
            finally:
                failed = chaos.finish() if chaos else None
                _stop(procs)
        after, drops_after = read_counters(intfs), self.drops(ports)
        ovs_after = ovsloss.snapshot(ports, edge, pid)
        return {"before": before, "after": after, "drops_before": drops_before, "drops_after": drops_after,
                "ovs_before": ovs_before, "ovs_after": ovs_after,
                "cpu": {**cpu.summary(), "ovs_backlog": backlog.summary() if backlog else None}, "lost": losses.stop(),
                "failed": failed, "wall": time.time() - t0}

    def failure_driver(self, events: list, start_dir: Path, ranks: int, timeout: float):
        """A :class:`testbed.emu.failctl.FailureDriver` on this fabric (the controller's API, else ``ip
        link``) whose t0 is the ranks' start barrier: every barrier file there, the latest mtime."""
        from testbed.emu.failctl import FabricControl, FailureDriver
        from testbed.plan.gray import gray_tc

        paths = [start_dir / f"barrier-start-{i}" for i in range(ranks)]

        def barrier() -> float | None:
            return max(p.stat().st_mtime for p in paths) if all(p.exists() for p in paths) else None

        return FailureDriver(FabricControl(self.rep, self.G, self.ctl, gray_tc=gray_tc), events, barrier, timeout,
                             what="every rank at the start barrier")

    def _start_ranks(self, jobs: list[JobRun], folder: Path, timeout: float, failures) -> list[tuple]:
        """One rank process per host, each with its config file and log: [(job, rank, host, Popen, log)].
        Every rank of every job shares the start barrier in ``folder/start``; per-QP windows follow the
        job's fan-in, and with failures the QPs' retries outlast the outages."""
        procs, total = [], sum(len(j.hosts) for j in jobs)
        try:
            self._start_jobs(jobs, folder, timeout, failures, procs, total)
        except BaseException:
            _stop(procs)        # the ranks already started would wait at the barrier until their timeout
            raise
        return procs

    def _start_jobs(self, jobs, folder: Path, timeout: float, failures, procs: list, total: int) -> None:
        for k, job in enumerate(jobs, start=1):
            jdir = folder / job.name
            jdir.mkdir(exist_ok=True)
            ips = [self.rep.ip(h) for h in job.hosts]
            fan_in = fan_in_of(job)
            for r, h in enumerate(job.hosts):
                qp = self.qp_config(h)
                qp["window"] = qp_window(qp["window"], fan_in, self.send_buffer is not None)
                if failures:
                    qp["retry_limit"] = F.retry_budget(failures, qp["timeout_s"], timeout)
                cfg = {"rank": r, "ips": ips, "job": k, "dir": str(jdir), "qp": qp,
                       "seed": job.seed, "iters": job.iters, "warmup": job.warmup, "timeout_s": timeout,
                       "chunks": job.chunks, "scale": self.scale,
                       "global": {"dir": str(folder / "start"), "index": len(procs), "n": total}, **job.extra}
                if job.trace is not None:
                    cfg["trace"] = job.trace
                else:
                    cfg["runs"] = [dict(x) for x in job.runs]
                path = jdir / f"config-{r}.json"
                path.write_text(json.dumps(cfg))
                log = open(jdir / f"rank-{r}.log", "w")  # noqa: SIM115 - closed by _stop after the process ends
                try:
                    procs.append((job, r, h, self.rep.popen(h, RANK + [str(path)], stdout=log,
                                                            stderr=subprocess.STDOUT), log))
                except BaseException:
                    log.close()
                    raise

    def _collect(self, jobs: list[JobRun], folder: Path) -> tuple[list[dict], list[dict]]:
        """Every job's figures from its ranks' reports (a missing report or a rank's error: one line)."""
        out_jobs, all_reports = [], []
        for job in jobs:
            jdir = folder / job.name
            reports = []
            for r in range(len(job.hosts)):
                f = jdir / f"rank-{r}.json"
                if not f.exists():
                    raise EmulationError(f"job {job.name} rank {r} wrote no report; see {jdir / f'rank-{r}.log'}")
                rep = json.loads(f.read_text())
                if "error" in rep:
                    raise EmulationError(f"job {job.name} rank {r} on {job.hosts[r]}: {rep['error']}; "
                                         f"see {jdir / f'rank-{r}.log'}")
                reports.append(rep)
            all_reports += reports
            start, end = R.job_span(reports)
            stats = {k: sum(rp["stats"][k] for rp in reports) for k in reports[0]["stats"] if k != "device"}
            doc = {"name": job.name, "hosts": list(job.hosts), "ranks": len(job.hosts), "jct_s": end - start,
                   "real_jct_ms": (end - start) / self.scale * 1e3, "start": start, "end": end, "qp_stats": stats,
                   "timeout_times": sorted(t for rp in reports for t in rp.get("timeout_times", []))}
            if job.trace is not None:
                doc["trace"] = R.trace_summary(reports, self.scale)
            else:
                doc["rows"] = R.job_rows(reports, self.scale)
            out_jobs.append(doc)
        return out_jobs, all_reports

    def _health(self, out_jobs: list[dict], all_reports: list[dict], cpu_sum: dict, lost: dict, drops: dict,
                failed: dict | None, wall: float, emulator: dict) -> dict:
        """The run's emulator health: CPU saturation, socket overflows, QP timeouts (outside the failure
        windows), and the loss ledger; frames no counter saw are unaccounted unless a failure schedule ran
        (frames on a downed port are counted nowhere). Frames lost inside Open vSwitch (``emulator``: the
        :func:`testbed.emu.ovsloss.losses` and the fabric's edge frames) are attributed, to the emulator:
        the run stays unhealthy."""
        from testbed.emu.health import saturation
        from testbed.emu.ovsloss import ENTRIES
        from testbed.emu.runhealth import assess

        reasons = saturation(cpu_sum, None, 0.0, float("inf"), lost["udp_rcvbuf_errors"], 0)
        ovs = dict(emulator["losses"])
        # what ovs-vswitchd read and did not queue holds the drops it counts itself: named once, by those
        ovs["ovs_send_socket"] -= drops["ovs_ports"] + drops["ovs_upcalls_lost"]
        if failed is not None:  # OVS's sends to a downed port fail too (ENETDOWN), uncounted like a full socket;
            # after a gray tc drop (ENOBUFS) it drops the rest of that sendmmsg batch, uncounted too
            ovs = {k: v for k, v in ovs.items() if k != "ovs_send_socket"}
        ledger = R.loss_ledger(all_reports, sum(drops.values()), ovs, emulator["edge"], lost["udp_rcvbuf_errors"])
        ranks_inside, why = R.inside_emulator(ovs, ledger["others_lost"], ENTRIES)
        if why:
            reasons.append(why)
        timeouts = sum(j["qp_stats"]["timeouts"] for j in out_jobs)
        if failed is not None:
            failed.update(F.timeout_verdict(failed, [t for j in out_jobs for t in j["timeout_times"]],
                                            max(j["end"] for j in out_jobs),
                                            self.qp_config(out_jobs[0]["hosts"][0])["timeout_s"]))
            timeouts = failed["timeouts_outside"]
        if timeouts:
            reasons.append(f"{timeouts} QP timeouts{' outside the failure windows' if failed else ''}: packets were "
                           "lost in a run that is lossless by construction")
        reasons = [r for r in reasons if "BMv2" not in r] + ovs_behind(cpu_sum)
        ledger["counted_by"] = drops
        ledger["machine_wide"] = ["ovs_upcalls_lost", "kernel_backlog"]
        ledger["ovs_send_buffer"] = emulator["send_socket"]    # its buffer: what all the queues share
        # the CPUs' backlog drops (softnet), a check: a veth counted each as its tx_dropped (counted_by kernel)
        ledger["kernel_backlog"] = emulator["kernel_backlog"]
        unaccounted = ledger["unattributed"]
        if failed is not None:
            ledger["note"] = ("a failure schedule ran: frames on a downed port are counted nowhere, nor the rest "
                              "of ovs-vswitchd's send batch after a gray drop (nor is its send socket inferred: "
                              "its sends to a downed port fail alike)")
            unaccounted = None
        block = assess(cpu=cpu_sum, unaccounted=unaccounted, lost_inside=ranks_inside, reasons=reasons)
        return {"ok": block["emulator_ok"], "reasons": block["emulator"]["reasons"], "cpu": cpu_sum, **lost,
                "losses": ledger, "wall_s": wall, "load": _load(), "block": block}


def backlog_watch(pid):
    """:class:`testbed.emu.ovsbacklog.BacklogWatch` of ovs-vswitchd, or a null context without one."""
    from contextlib import nullcontext

    from testbed.emu.ovsbacklog import BacklogWatch

    return BacklogWatch(pid) if pid else nullcontext()


def ovs_behind(cpu: dict) -> list[str]:
    """ovs-vswitchd saturated: its main loop busy (>= 90% of a core at some sample) *and* frames left
    waiting in its ports' receive sockets (testbed.emu.ovsbacklog: busy alone is what it does with a core to
    spare, measured at the ring's bound). Without a backlog reading (no OVS), the CPU alone decides."""
    busy = cpu.get("switch_max", 0)
    if busy < 90:
        return []
    backlog = cpu.get("ovs_backlog")
    if backlog is not None and not backlog["behind"]:
        return []
    waiting = f", {backlog['max_bytes']:,} B waiting in its port sockets at the peak" if backlog else ""
    return [f"ovs-vswitchd at {busy:.0f}% of a core{waiting}"]


def _stop(procs: list[tuple]) -> None:
    """Terminate rank processes still running (a timeout or an error elsewhere) and close their logs."""
    for _, _, _, p, log in procs:
        if p.poll() is None:
            p.terminate()
            p.wait(timeout=10)
        log.close()


def _load() -> list[float]:

    return [round(x, 2) for x in load_average()]
