"""One BMv2 ``simple_switch`` process: argv (pure), start, readiness, crash report, stop.

    Bmv2Config --switch_argv()--> [simple_switch_fast --thrift-port P --device-id D -i 1@eth1 ... prog.json]
         |
    Bmv2Process.start(run)  -> RunRegistry.spawn (recorded, stdout/stderr -> <log_dir>/<name>.log)
    Bmv2Process.wait_ready  -> poll: the Thrift port answers; a dead process fails at once with its log
    Bmv2Process.client()    -> SwitchClient (tables, counters, queues)

``simple_switch_fast`` (logging compiled out, ~3.7x the packet rate) is used unless per-packet logs are
requested (``log=True``), which needs the logging build ``simple_switch`` and ``--log-file``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from testbed.errors import CapabilityError, EmulationError, SpecError
from testbed.p4rt.client import SwitchClient
from testbed.p4rt.loopback import loopback_env
from testbed.p4rt.rx import read_rx_stats, rx_env
from testbed.poll import poll

FAST_BINARY = "simple_switch_fast"
LOG_BINARY = "simple_switch"


def pick_binary(log: bool = False, which: Callable[[str], str | None] = shutil.which) -> str:
    """The switch binary: ``simple_switch_fast`` unless logging is wanted or it is absent.

    Raises:
        CapabilityError: no BMv2 binary is installed.
    """
    order = (LOG_BINARY,) if log else (FAST_BINARY, LOG_BINARY)
    for name in order:
        path = which(name)
        if path:
            return path
    raise CapabilityError(f"{' or '.join(order)} not found: install BMv2 (sudo make setup; see testbed doctor)")


@dataclass(frozen=True)
class Bmv2Config:
    """Everything needed to start one switch.

    Args:
        name: switch name (log file, error messages).
        json_path: compiled program (see :func:`testbed.p4rt.compile.compile_p4`).
        ports: {port number: interface name}.
        thrift_port, device_id: from the run's :class:`testbed.plan.alloc.Allocator`.
        log_dir: where ``<name>.log`` (process output) and, with ``log``, ``<name>.pkt.log.txt`` go.
        log: per-packet logging (slow; uses the logging build).
        pcap_dir: write ``<intf>_in.pcap``/``_out.pcap`` per port there.
        extra_args: appended before the JSON path.
    """

    name: str
    json_path: Path
    ports: Mapping[int, str]
    thrift_port: int
    device_id: int
    log_dir: Path
    log: bool = False
    pcap_dir: Path | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self):
        for port, intf in self.ports.items():
            if not (isinstance(port, int) and 0 <= port < 512):
                raise SpecError(f"switches.{self.name}.ports", f"port {port!r} must be an int in 0..511")
            if not intf or " " in intf:
                raise SpecError(f"switches.{self.name}.ports", f"bad interface name {intf!r}")
        if not 1 <= self.thrift_port <= 65535:
            raise SpecError(f"switches.{self.name}.thrift_port", f"{self.thrift_port} is not a TCP port")

    @property
    def log_path(self) -> Path:
        return Path(self.log_dir) / f"{self.name}.log"

    @property
    def packet_log_path(self) -> Path:
        """BMv2 appends ``.txt`` to the name given with ``--log-file``."""
        return Path(self.log_dir) / f"{self.name}.pkt.log.txt"


#: Priority queues per egress port (simple_switch's target option): p4/fabric.p4 sends CNPs in priority 6
#: (strict priority over data, as switches carrying RoCE are configured). BMv2 drops a packet whose
#: priority has no queue, so every switch gets all eight; queue rate and depth apply to each of them.
PRIORITY_QUEUES = 8


def switch_argv(cfg: Bmv2Config, binary: str) -> list[str]:
    """Command line of the switch (pure). Target options (after ``--``) come last."""
    argv = [binary, "--thrift-port", str(cfg.thrift_port), "--device-id", str(cfg.device_id),
            "--notifications-addr", f"ipc:///tmp/bmv2-testbed-{cfg.thrift_port}-notifications.ipc"]
    for port in sorted(cfg.ports):
        argv += ["-i", f"{port}@{cfg.ports[port]}"]
    if cfg.log:
        argv += ["--log-file", str(cfg.packet_log_path)[: -len(".txt")], "--log-flush", "-L", "debug"]
    if cfg.pcap_dir is not None:
        argv += [f"--pcap={cfg.pcap_dir}"]
    argv += list(cfg.extra_args)
    argv.append(str(cfg.json_path))
    argv += ["--", "--priority-queues", str(PRIORITY_QUEUES)]
    return argv


def thrift_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


#: CFS nice value of every BMv2 process (all its threads inherit it). The switches are the data plane: a
#: host's CPU burst must not stall them. Measured (long haul, 30 km, ECN, 2 cores): while both soft-RDMA
#: senders ran at line rate before ECN's first cut, the switches after the congestion point, at nice 0,
#: forwarded 280-850 of 1155 frames/s for 0.4 s, then caught up in a burst: the marked frames reached the
#: receiver 140-230 ms (emulated) later than the fibre allows. The delay lines already run SCHED_FIFO.
SWITCH_NICE = -10


def niced(argv: list[str], nice: int = SWITCH_NICE) -> list[str]:
    """``argv`` run at CFS nice ``nice`` (``nice`` execs, so the pid is the switch's); unchanged when not
    root (raising priority needs it) or when ``nice`` is 0."""
    import os

    if nice == 0 or (nice < 0 and os.geteuid() != 0):
        return list(argv)
    return ["nice", "-n", str(nice), *argv]


class Bmv2Process:
    """A running ``simple_switch`` (started with :meth:`start`, stopped with :meth:`stop`)."""

    def __init__(self, cfg: Bmv2Config):
        self.cfg = cfg
        self.binary = pick_binary(cfg.log)
        self.argv = switch_argv(cfg, self.binary)
        self.proc: subprocess.Popen | None = None

    def start(self, run, netns: str | None = None) -> "Bmv2Process":
        """Start the switch, recorded in ``run`` (a :class:`testbed.emu.registry.RunRegistry`)."""
        Path(self.cfg.log_dir).mkdir(parents=True, exist_ok=True)
        if self.cfg.pcap_dir is not None:
            Path(self.cfg.pcap_dir).mkdir(parents=True, exist_ok=True)
        self.rx_stats_path.unlink(missing_ok=True)
        self.proc = run.spawn(niced(self.argv), netns=netns, log=self.cfg.log_path,
                              env=rx_env(loopback_env(), self.rx_stats_path))
        return self

    @property
    def rx_stats_path(self) -> Path:
        """Where the receive shim writes this switch's capture-ring counters (:mod:`testbed.p4rt.rx`)."""
        return Path(self.cfg.log_dir) / f"{self.cfg.name}-rx.json"

    def rx_stats(self) -> dict | None:
        return read_rx_stats(self.rx_stats_path)

    def check_alive(self) -> None:
        """Raise :class:`EmulationError` naming the log when the switch process has exited."""
        if self.proc is None:
            raise EmulationError(f"switch {self.cfg.name} was never started")
        rc = self.proc.poll()
        if rc is not None:
            tail = log_tail(self.cfg.log_path)
            raise EmulationError(f"switch {self.cfg.name} exited with status {rc}; see {self.cfg.log_path}"
                                 + (f": {tail}" if tail else ""))

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait until the Thrift port answers; fail at once (with the log path) if the process dies."""
        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                return True  # dead: reported below
            return thrift_answers(self.cfg.thrift_port)

        try:
            poll(ready, timeout=timeout, interval=0.02, what=f"switch {self.cfg.name} Thrift port "
                                                              f"{self.cfg.thrift_port}")
        except TimeoutError as exc:
            raise EmulationError(f"switch {self.cfg.name} did not start: {exc}; see {self.cfg.log_path}") from None
        self.check_alive()

    def client(self) -> SwitchClient:
        self.check_alive()
        return SwitchClient(self.cfg.name, self.cfg.thrift_port)

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the switch (the registry kills it anyway when the run ends)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)
