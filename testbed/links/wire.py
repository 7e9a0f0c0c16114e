"""Two namespaces joined by one emulated link: the bench's and the integration tests' fixture (root glue).

::

    netns {p}A                root namespace                    netns {p}B
    [{p}a0 10.77.0.1] --veth-- [{p}da]  delay line  [{p}db] --veth-- [{p}b0 10.77.0.2]

Every namespace, veth and the delay-line process is recorded in the caller's
:class:`~testbed.emu.registry.RunRegistry` before it exists, so leaving the registry's ``with`` block
removes them even after an error. Names carry a per-process prefix (``lk`` + 4 digits) so that they
never clash with anyone else's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from testbed.emu import capture, ops
from testbed.emu.registry import RunRegistry
from testbed.errors import EmulationError
from testbed.links.core import line_argv, rt_priority_of
from testbed.links.delayline import DEFAULT_LATE_TOLERANCE_S, read_stats
from testbed.links.model import LinkParams
from testbed.links.probe import wait_bound
from testbed.poll import poll

IP_A, IP_B = "10.77.0.1", "10.77.0.2"
MAC_A, MAC_B = "02:77:00:00:00:01", "02:77:00:00:00:02"


def name_prefix(tag: str = "") -> str:
    """``lk`` + 4 digits of our pid (+ a 1-char tag): unique on this machine while we run."""
    return f"lk{os.getpid() % 10000:04d}{tag[:1]}"


class Wire:
    """Host A -- delay line -- host B. Create with :func:`open_wire`."""

    def __init__(self, run: RunRegistry, prefix: str, workdir: Path, core: str | None = None):
        self.run = run
        self.default_core = core
        self.prefix = prefix
        self.ns_a, self.ns_b = f"{prefix}A", f"{prefix}B"
        self.if_a, self.if_b = f"{prefix}a0", f"{prefix}b0"
        self.dl_a, self.dl_b = f"{prefix}da", f"{prefix}db"
        self.ip_a, self.ip_b = IP_A, IP_B
        self.workdir = Path(workdir)
        self.stats_path = self.workdir / f"{prefix}-delayline.json"
        self.log_path = self.workdir / f"{prefix}-delayline.log"
        self.proc: subprocess.Popen | None = None
        self.core: str | None = None

    def build(self) -> None:
        run = self.run
        run.add_netns(self.ns_a)
        run.add_netns(self.ns_b)
        run.add_veth(self.if_a, self.dl_a, ns_a=self.ns_a)
        run.add_veth(self.dl_b, self.if_b, ns_b=self.ns_b)
        for intf in (self.dl_a, self.dl_b):
            ops.run(["sysctl", "-qw", f"net.ipv6.conf.{intf}.disable_ipv6=1"], what=f"disable IPv6 on {intf}",
                    check=False)
        self.configure_hosts()

    def configure_hosts(self) -> None:
        """Addresses, static neighbours (no ARP crosses the link) and no IPv6 in hosts A and B."""
        for ns, intf, ip, mac, peer_ip, peer_mac in ((self.ns_a, self.if_a, IP_A, MAC_A, IP_B, MAC_B),
                                                     (self.ns_b, self.if_b, IP_B, MAC_B, IP_A, MAC_A)):
            for argv in (["ip", "link", "set", intf, "address", mac],
                         ["ip", "addr", "add", f"{ip}/24", "dev", intf],
                         ["ip", "neigh", "replace", peer_ip, "lladdr", peer_mac, "dev", intf, "nud", "permanent"]):
                ops.run(ops.in_netns(argv, ns), what=f"configure {intf} in {ns}")
            ops.run(ops.netns_exec_argv(["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"], ns),
                    what=f"disable IPv6 in {ns}", check=False)

    def start(self, params: LinkParams, *, seed: int | None = None,
              late_tolerance_s: float = DEFAULT_LATE_TOLERANCE_S, spin_s: float | None = None,
              core: str | None = None, cpu: int | None = None, poll_window_s: float | None = None) -> dict:
        """Start the link node with the *emulated* ``params``; returns its first stats document.

        Args:
            core: ``c``, ``python`` or ``bare`` (see :mod:`testbed.links.core`; None: the default).
            cpu: pin the compiled core to this CPU.
            poll_window_s: the compiled core's busy-read window after a frame (None: its default).
        """
        if self.proc is not None:
            raise EmulationError(f"delay line on {self.dl_a}/{self.dl_b} already running")
        self.stats_path.unlink(missing_ok=True)
        self.core, argv = line_argv(self.dl_a, self.dl_b, params, self.stats_path, core=core or self.default_core, seed=seed,
                                    late_tolerance_s=late_tolerance_s, stats_interval_s=0.5, spin_s=spin_s,
                                    cpu=cpu, poll_window_s=poll_window_s)
        self.proc = spawn_core(self.run, argv, self.log_path)
        return wait_ready(self.proc, self.stats_path, self.log_path, what=f"delay line {self.prefix}")

    def stop(self) -> dict:
        """Stop the delay line; returns its final stats (with the queue-depth series)."""
        return stop_delayline(self.proc, self.stats_path, self.log_path) if self.proc else {}

    def restart(self, params: LinkParams, **kwargs) -> dict:
        """Stop the delay line and start a fresh one (zeroed counters) with new ``params``."""
        self.stop()
        self.proc = None
        return self.start(params, **kwargs)

    def stats(self) -> dict | None:
        return read_stats(self.stats_path)

    def probe(self, count: int, pps: float, size: int = 1472, tos: int = 0, port: int = 5201,
              idle: float = 1.0, timeout: float = 60.0) -> tuple[dict, dict]:
        """Send ``count`` UDP probes A -> B (see :mod:`testbed.links.probe`); returns (sender, receiver) docs."""
        ready = self.workdir / f"{self.prefix}-probe.ready"
        out = self.workdir / f"{self.prefix}-probe.json"
        for f in (ready, out):
            f.unlink(missing_ok=True)
        py = [sys.executable, "-m", "testbed.links.probe"]
        env = {**os.environ, "PYTHONPATH": _repo_path()}
        recv = subprocess.Popen(self.exec_argv("b", py + ["recv", "--port", str(port), "--ready", str(ready),
                                                          "--out", str(out), "--count", str(count),
                                                          "--idle", str(idle), "--timeout", str(timeout)]),
                                env=env)
        try:
            wait_bound({ready: (recv, "probe receiver")})  # 30 s: a slow (TCG) guest
            sent = subprocess.run(self.exec_argv("a", py + ["send", "--dst", self.ip_b, "--port", str(port),
                                                            "--count", str(count), "--pps", str(pps),
                                                            "--size", str(size), "--tos", str(tos)]),
                                  env=env, capture_output=True, text=True, timeout=timeout, check=True)
            recv.wait(timeout=timeout + 10)
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
        if recv.returncode != 0 or not out.exists():
            raise EmulationError(f"probe receiver failed with status {recv.returncode}")
        return json.loads(sent.stdout), json.loads(out.read_text())

    @contextmanager
    def capture(self, side: str, port: int, name: str):
        """tcpdump (nanosecond kernel timestamps, first 96 bytes) of UDP ``port`` on host ``side``'s
        interface while the block runs; yields the path (:func:`testbed.emu.capture.tcpdump`)."""
        path = self.workdir / f"{self.prefix}-{name}.pcap"
        log = self.workdir / f"{self.prefix}-{name}.tcpdump.log"
        intf = self.if_a if side == "a" else self.if_b
        argv = capture.tcpdump_argv(intf, path, ["udp", "port", str(port)], snaplen=96, nano=True)
        with capture.tcpdump(lambda a, lg: self.run.spawn(self.exec_argv(side, a), log=lg), argv, log, intf):
            yield path

    def exec_argv(self, side: str, argv: list[str]) -> list[str]:
        """``argv`` wrapped to run in host ``a`` or ``b``."""
        return ops.netns_exec_argv(argv, self.ns_a if side == "a" else self.ns_b)


def spawn_core(run: RunRegistry, argv: list[str], log: Path) -> subprocess.Popen:
    """Start a link core (``argv`` from :func:`testbed.links.core.line_argv`) in ``run``, with this checkout
    on its path. The registry learns the core's real-time priority from ``argv`` itself
    (:func:`~testbed.links.core.rt_priority_of`): the softirq threads then run above exactly that."""
    return run.spawn(argv, log=log, env={**os.environ, "PYTHONPATH": _repo_path()}, realtime=rt_priority_of(argv))


def _repo_path() -> str:
    """Directory containing the ``testbed`` package, so ``python -m testbed...`` works as root."""
    return str(Path(__file__).resolve().parent.parent.parent)


def wait_ready(proc: subprocess.Popen, stats_path: Path, log_path: Path, what: str, timeout: float = 15.0) -> dict:
    """Poll until the delay line wrote ``ready`` to its stats file; raise naming its log if it died."""

    def ready():
        if proc.poll() is not None:
            raise EmulationError(f"{what} exited with status {proc.returncode}; see {log_path}")
        doc = read_stats(stats_path)
        return doc if doc and doc.get("ready") else None

    try:
        return poll(ready, timeout=timeout, interval=0.02, what=f"{what} to bind its interfaces")
    except TimeoutError as exc:
        if proc.poll() is not None:
            raise EmulationError(f"{what} exited with status {proc.returncode}; see {log_path}") from None
        raise EmulationError(f"{exc}; see {log_path}") from None


def stop_delayline(proc: subprocess.Popen, stats_path: Path, log_path: Path, timeout: float = 10.0) -> dict:
    """SIGTERM the delay line, wait for it to write its final stats and exit; return those stats."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
            raise EmulationError(f"delay line pid {proc.pid} ignored SIGTERM; see {log_path}") from None
    if proc.returncode not in (0, -signal.SIGTERM):
        raise EmulationError(f"delay line exited with status {proc.returncode}; see {log_path}")
    return read_stats(stats_path) or {}


def open_wire(run: RunRegistry, workdir: Path, params: LinkParams | None = None, tag: str = "",
              core: str | None = None, **start_kwargs) -> Wire:
    """Build host A -- link -- host B inside ``run``; start the link node when ``params`` is given.

    ``core`` is the default link core of this wire's starts (``c``, ``python``, ``bare``; None: the default).
    """
    wire = Wire(run, name_prefix(tag), workdir, core=core)
    wire.workdir.mkdir(parents=True, exist_ok=True)
    wire.build()
    if params is not None:
        wire.start(params, **start_kwargs)
    return wire


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
