"""Emulator health: was the emulator, not the protocol, the limit of a trial?

Every run reports it (BRIEF: "runs report emulator health"): machine and switch CPU sampled while a
trial runs (:class:`CpuWatch`), frames the kernel dropped on a switch's packet sockets
(:func:`packet_socket_drops` over ``ss -0 -m -p -H``), datagrams lost in host socket buffers
(:func:`udp_rcvbuf_errors` over /proc/net/snmp), a delay line running late, and losses no switch
counted. :func:`saturation` turns them into reasons to distrust the trial (empty: trust it).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import threading
import time
from pathlib import Path

from testbed.emu.cpustat import host_cpu_times, spinner_pids, steal_fraction
from testbed.emu.runhealth import timer_stall_reason


def saturation(cpu: dict, delay_line: dict | None, switch_pps: float, bench_pps: float,
               udp_overflows: int = 0, switch_socket_drops: int = 0, unexplained_gaps: int = 0) -> list[str]:
    """Reasons to distrust a trial: the emulator, not the protocol, was the limit (empty: trust it).

    Args:
        cpu: {"machine_mean", "switch_max"} percentages sampled during the trial, and the timer probe's
            ``timers`` (:class:`CpuWatch`).
        delay_line: the long haul's stats (None: no delay line). Frames sent late count only when the
            lateness is a noticeable share (2%) of the emulated one-way delay. Without one nothing measured
            the long haul's lateness (tc netem, or no long haul): the machine's timers stalling too long
            (:func:`testbed.emu.runhealth.timer_stall_reason`) is then a reason.
        switch_pps: busiest switch's packet rate during the trial.
        bench_pps: what one BMv2 forwards on this machine (``testbed bench p4``).
        udp_overflows: datagrams the hosts' kernels dropped because an endpoint did not read in time.
        switch_socket_drops: frames the kernel dropped because a BMv2 switch did not read in time.
        unexplained_gaps: sequence gaps the receivers NAKed beyond the drops the switches counted: every
            switch drop is counted in fabric.p4, so these frames were lost in the emulator's I/O.
    """
    why = []
    if cpu.get("machine_mean", 0) >= 95:
        why.append(f"machine CPU {cpu['machine_mean']:.0f}%")
    if cpu.get("switch_max", 0) >= 90:
        why.append(f"a BMv2 process at {cpu['switch_max']:.0f}% of a core")
    if delay_line:
        dirs = delay_line.get("directions", {}).values()
        sent = sum(d.get("tx_packets", 0) for d in dirs)
        late = delay_line.get("emulator_late", 0)
        worst = max((d.get("mean_late_lateness_s", 0.0) for d in dirs), default=0.0)
        one_way = (delay_line.get("params") or {}).get("delay_s") or 0.0
        if sent and late / sent > 0.01 and worst > 0.02 * one_way:
            why.append(f"delay line late on {late / sent:.1%} of frames (by {worst * 1e3:.1f} ms on average)")
        if delay_line.get("rx_kernel_drops", 0):
            why.append(f"delay line lost {delay_line['rx_kernel_drops']} frames in the kernel")
    else:
        stalled = timer_stall_reason(cpu.get("timers"))
        if stalled:
            why.append(stalled)
    if switch_pps > 0.8 * bench_pps:
        why.append(f"busiest switch at {switch_pps:.0f} pps, near BMv2's {bench_pps:.0f} pps here")
    if udp_overflows:
        why.append(f"{udp_overflows} datagrams lost in host socket buffers (an endpoint fell behind)")
    if switch_socket_drops:
        why.append(f"{switch_socket_drops} frames lost before BMv2 read them (a switch fell behind)")
    if unexplained_gaps:
        why.append(f"{unexplained_gaps} losses outside the switch pipelines (receiver NAKs without a counted drop)")
    return why


def packet_socket_drops(ss_text: str, pids) -> int:
    """Frames the kernel dropped on the packet sockets of processes ``pids`` (``ss -0 -m -p -H``: the
    ``d`` of ``skmem``): what a BMv2 switch lost because it did not read its ports in time."""

    want = {str(p) for p in pids}
    total = 0
    for line in ss_text.splitlines():
        owner = re.search(r"pid=(\d+)", line)
        drops = re.search(r"skmem:\([^)]*\bd(\d+)\)", line)
        if owner and drops and owner.group(1) in want:
            total += int(drops.group(1))
    return total


def udp_rcvbuf_errors(snmp_text: str) -> int:
    """``Udp: RcvbufErrors`` from /proc/net/snmp text (0 when absent)."""
    lines = [ln.split() for ln in snmp_text.splitlines() if ln.startswith("Udp:")]
    if len(lines) < 2 or "RcvbufErrors" not in lines[0]:
        return 0
    return int(lines[1][lines[0].index("RcvbufErrors")])


class CpuWatch:
    """Samples machine CPU and the switches' CPU every 0.5 s on a thread (while a trial runs), and runs a
    :class:`testbed.emu.timerprobe.TimerProbe` beside it: how late the machine fired timers meanwhile
    (every run gets it this way: every scenario watches its trials with a CpuWatch)."""

    def __init__(self, pids, exclude=(), timer_tolerance_s: float | None = None):
        """``pids``: the switches (a list, or ``{name: pid}`` to have them named in the summary's
        ``processes``); ``exclude``: processes whose CPU is not the emulator's load, subtracted from the
        machine's -- every :class:`testbed.emu.awake.KeepAwake` spinner running now is added to it, whoever
        started it, and so is the timer probe; ``timer_tolerance_s``: the probe's tolerance (default
        :data:`testbed.emu.timerprobe.TOLERANCE_S`)."""
        import psutil

        from testbed.emu.timerprobe import TOLERANCE_S, TimerProbe

        named = pids if isinstance(pids, dict) else {str(p): p for p in pids}
        self.names = [n for n, p in named.items() if p]
        self.procs = [psutil.Process(named[n]) for n in self.names]
        self.excluded = []
        for pid in sorted({*exclude, *spinner_pids()}):
            try:
                self.excluded.append(psutil.Process(pid))
            except psutil.Error:   # a spinner that ended as we looked
                pass
        self.ncpu = psutil.cpu_count() or 1
        self.machine: list[float] = []
        self.switch: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self.probe = TimerProbe(tolerance_s=TOLERANCE_S if timer_tolerance_s is None else timer_tolerance_s)

    def _run(self):
        import psutil

        psutil.cpu_percent(None)
        for p in (*self.procs, *self.excluded):
            p.cpu_percent(None)
        while not self._stop.wait(0.5):
            machine = psutil.cpu_percent(None)
            try:
                machine -= sum(p.cpu_percent(None) for p in self.excluded) / self.ncpu
            except psutil.Error:
                pass
            self.machine.append(max(0.0, machine))
            try:
                self.switch.append(max((p.cpu_percent(None) for p in self.procs), default=0.0))
            except psutil.Error:
                pass

    def __enter__(self):
        import psutil

        self.probe.__enter__()
        try:
            self.excluded.append(psutil.Process(self.probe.pid))
            self._times = [host_cpu_times()]
            self._wall = [time.monotonic()]
            self._cpu = {n: [_cpu_s(p)] for n, p in zip(self.names, self.procs, strict=True)}
            self._t.start()
        except BaseException:
            self.probe.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        try:
            self._stop.set()
            self._t.join(timeout=5)
            self._times.append(host_cpu_times())
            self._wall.append(time.monotonic())
            for n, p in zip(self.names, self.procs, strict=True):
                self._cpu[n].append(_cpu_s(p))
        finally:
            self.probe.__exit__(*exc)   # stopped on every way out: no probe outlives its watch

    def summary(self) -> dict:
        """Means over the trial; ``host_steal``: the share of CPU time the hypervisor took (the emulator's
        late frames track it on a VM, docs/pfc.md "Lateness"); ``processes``: each watched process's CPU
        seconds over the trial's wall seconds (None: it ended before the trial did); ``timers``: the timer
        probe's figures (:func:`testbed.emu.timerprobe.summarise`; None before the watch ends)."""
        steal = steal_fraction(*self._times) if len(self._times) == 2 else 0.0
        wall = self._wall[1] - self._wall[0] if len(self._wall) == 2 else 0.0
        procs = {n: {"cpu_s": round(c[1] - c[0], 3) if len(c) == 2 and None not in c else None,
                     "wall_s": round(wall, 3)} for n, c in getattr(self, "_cpu", {}).items()}
        return {"machine_mean": statistics.fmean(self.machine) if self.machine else 0.0,
                "switch_max": max(self.switch, default=0.0), "host_steal": round(steal, 4), "processes": procs,
                "timers": self.probe.summary}


def _cpu_s(proc) -> float | None:
    """User + system CPU seconds of a psutil process so far (None: it has gone)."""
    import psutil

    try:
        t = proc.cpu_times()
    except psutil.Error:
        return None
    return t.user + t.system


def ovs_pid() -> int | None:
    """ovs-vswitchd's pid (None: not running). One daemon serves every run on the machine."""
    for path in ("/run/openvswitch/ovs-vswitchd.pid", "/var/run/openvswitch/ovs-vswitchd.pid"):
        try:
            return int(Path(path).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return None


def emulator_processes(rep=None, controller=None, own: bool = False) -> dict:
    """``{name: pid}`` of the processes that carry a run's emulation, for :class:`CpuWatch`'s per-process
    CPU: ovs-vswitchd (when the replica has OVS switches), the fabric controller, each BMv2 switch of the
    replica ``rep`` and, with ``own``, this process (OCS nodes run in it as threads)."""
    out = {}
    entries = rep.plan.switches if rep is not None else ()
    ovs = ovs_pid() if any(s.kind == "ovs" for s in entries) else None
    if ovs:
        out["ovs-vswitchd"] = ovs
    for sw in (rep.switch(s.node) for s in entries):
        proc = getattr(getattr(sw, "process", None), "proc", None)
        if proc is not None and proc.poll() is None:
            out[sw.name] = proc.pid
    if controller is not None and controller.proc.poll() is None:
        out["controller"] = controller.proc.pid
    if own:
        out["scenario"] = os.getpid()
    return out


def ss_packet_sockets() -> str:
    """``ss -0 -m -p -H``: packet sockets with their memory counters and owners."""
    return subprocess.run(["ss", "-0", "-m", "-p", "-H"], capture_output=True, text=True).stdout


class LossWatch:
    """Host socket-buffer overflows and switch packet-socket drops between ``start()`` and ``stop()``.

    Args:
        rep: the replica (host commands run in the hosts' namespaces).
        hosts: graph nodes of the hosts to watch.
        pids: the switch processes whose packet sockets count.
    """

    def __init__(self, rep, hosts, pids):
        self.rep, self.hosts, self.pids = rep, list(hosts), list(pids)
        self._udp: dict = {}
        self._sock = 0

    def _snmp(self, h) -> int:
        return udp_rcvbuf_errors(self.rep.host(h).cmd("cat /proc/net/snmp"))

    def start(self) -> "LossWatch":
        self._udp = {h: self._snmp(h) for h in self.hosts}
        self._sock = packet_socket_drops(ss_packet_sockets(), self.pids)
        return self

    def stop(self) -> dict:
        return {"udp_rcvbuf_errors": sum(self._snmp(h) - self._udp[h] for h in self.hosts),
                "switch_socket_drops": packet_socket_drops(ss_packet_sockets(), self.pids) - self._sock}
