"""The optical circuit switch as a Mininet node (root glue over :mod:`testbed.ocs.model`).

::

    dciA --veth-- [x0-eth1]  OcsNode x0 (own netns)  [x0-eth2] --veth-- working fibre
                                                      [x0-eth3] --veth-- standby fibre
          tc ingress on every port: "mirred egress redirect dev <peer port>" = the circuit;
          no rule = dark: frames reach the node's empty namespace (no address, no forwarding) and die

Why tc mirred and not an OVS bridge with port-to-port flows: an OCS is layer 1 -- no learning, no
lookup, no flooding, frames leave untouched. A kernel redirect between two veths is exactly that, costs
no userspace CPU on a 2-core shared machine (OVS here has only its userspace datapath) and changes
atomically per port with one ``tc filter`` call. The node has no controller and no OpenFlow, and it
lives in its own network namespace, so a dark port's frames never reach the machine's own stack.

Reconfiguration runs the model's window in dilated time: the ports whose peer changes lose their
prio-1 rule (dark), the new rules go in ``reconfig_s x scale`` later. That wait is the emulated
device's own switching time (mirrors turning), not a wait for readiness, so it is a deadline, not a
poll. With a :class:`~testbed.ocs.model.ProtectionGroup` a reader thread follows ``ip -o monitor link``
in the node's namespace (carrier events, no polling) and a protection thread switches the common port
to standby once the working port has had no carrier (loss of light) for ``detect_s x scale``. tc rules
of one step go in one ``tc -batch`` process, so the emulator's own overhead per step is one process start.
A schedule of circuit changes (:meth:`OcsNode.play`) runs in dilated time too.
Every step is timestamped in :attr:`OcsNode.events` (wall clock).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time

from mininet.node import Switch

from testbed.emu import ops
from testbed.errors import EmulationError
from testbed.ocs.model import CircuitSwitch, ProtectionGroup, dark_argv, ingress_argv, light_argv

_NO_LIGHT = ("NO-CARRIER", "state DOWN", "state LOWERLAYERDOWN")


def link_line_dark(line: str, intf: str) -> bool | None:
    """From one ``ip -o link`` / ``ip -o monitor link`` line: True (``intf`` has no light), False (it
    has), None (the line is about another interface)."""
    head = line.split(":", 2)
    if len(head) < 3 or head[1].strip().split("@")[0] != intf:
        return None
    return any(mark in line for mark in _NO_LIGHT) or "state UP" not in line


class OcsNode(Switch):
    """Mininet node realising one :class:`CircuitSwitch` between its interfaces (port i = ``<name>-eth<i>``).

    Args:
        name: node name.
        ocs: the model (its ``circuits`` are set at start, without a window).
        scale: time dilation of the replica (reconfiguration and detection times x scale).
        protection: optional 1:1 protection group run by a loss-of-light monitor.
    """

    def __init__(self, name: str, ocs: CircuitSwitch | None = None, scale: float = 1.0,
                 protection: ProtectionGroup | None = None, **params):
        if ocs is None:
            raise EmulationError(f"OCS node {name}: no CircuitSwitch given")
        self.ocs, self.scale, self.protection = ocs, float(scale), protection
        self.events: list[dict] = []
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._watcher = None
        self._players: list[threading.Thread] = []
        self._changed = threading.Condition()
        self._dark_since: float | None = None
        self._lock = threading.Lock()
        self.monitor_error: str | None = None
        super().__init__(name, **params)

    def port_intf(self, port: int) -> str:
        try:
            return self.intfs[port].name
        except KeyError:
            raise EmulationError(f"OCS {self.name} has no port {port} (ports: {sorted(self.intfs)})") from None

    def _run(self, argv, what, check: bool = True) -> str:
        """Run ``argv`` in the node's namespace (safe from the monitor thread: its own process)."""
        proc = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, _ = proc.communicate(timeout=15)
        if check and proc.returncode != 0:
            raise EmulationError(f"cannot {what} on OCS {self.name}: `{' '.join(argv)}` failed: {out.strip()[-200:]}")
        return out

    def _batch(self, argvs: list[list[str]], what: str, check: bool = True) -> None:
        """Several tc commands as one ``tc -batch`` run by the node's own shell: no new process to enter
        the namespace (a Python popen + mnexec costs tens of ms on a loaded machine), only tc's own exec.
        Callers hold ``self._lock`` (the shell serves one command at a time)."""
        if not argvs:
            return
        with tempfile.NamedTemporaryFile("w", prefix=f"{self.name}-tc-", suffix=".batch", delete=False) as fh:
            fh.write("".join(" ".join(argv[1:]) + "\n" for argv in argvs))
        try:
            out = self.cmd(f"tc -force -batch {fh.name}; echo rc=$?")
        finally:
            os.unlink(fh.name)
        if check and "rc=0" not in out:
            raise EmulationError(f"cannot {what} on OCS {self.name}: tc -batch failed: {out.strip()[-200:]}")

    def start(self, controllers) -> None:
        for port in sorted(p for p in self.intfs if p > 0):
            intf = self.port_intf(port)
            self._run(ops.offload_off_argv(intf), f"disable offloads on {intf}", check=False)
            self._run(["ip", "link", "set", "dev", intf, "up"], f"bring {intf} up")
            for argv in ingress_argv(intf):
                self._run(argv, "make a port")
        for a, b in self.ocs.circuits.items():
            self._run(light_argv(self.port_intf(a), self.port_intf(b)), "join a circuit")
        self._event("start", circuits=dict(self.ocs.circuits))
        if self.protection is not None:
            self._watcher = self.popen(["ip", "-o", "monitor", "link"], stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True, bufsize=1)
            run = getattr(self, "run", None)
            if run is not None:
                run.record_process(self._watcher, argv=["ip", "-o", "monitor", "link"])
            self._monitor = threading.Thread(target=self._watch, name=f"{self.name}-los", daemon=True)
            self._monitor.start()

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's signature
        self._stop.set()
        if self._watcher is not None:
            self._watcher.terminate()
            try:
                self._watcher.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._watcher.kill()
        with self._changed:
            self._changed.notify_all()
        for thread in [self._monitor, *self._players]:
            if thread is not None:
                thread.join(timeout=5)
        super().stop(deleteIntfs)

    def connected(self) -> bool:
        """Mininet asks switches whether they reached a controller; an OCS has none."""
        return True

    def _event(self, kind: str, **data) -> None:  # list.append is atomic: safe from the monitor thread
        self.events.append({"kind": kind, "time": time.time(), **data})

    def set_circuits(self, mapping: dict, reason: str = "api") -> dict:
        """Reconfigure to ``mapping`` ({a: b}): dark ports now, light after reconfig_s x scale.

        Returns:
            {"dark_at", "light_at", "dark_ports", "circuits"} (wall clock).
        """
        with self._lock:
            now = time.time()
            rec = self.ocs.set_circuits(now / self.scale, mapping)  # model time = real (undilated) seconds
            self._batch([dark_argv(self.port_intf(p)) for p in sorted(rec.dark) if self.ocs.circuits.get(p)],
                        "darken ports", check=False)
            dark_at = time.time()
            self._event("dark", ports=sorted(rec.dark), reason=reason)
            deadline = dark_at + (rec.end - rec.start) * self.scale
            remaining = deadline - time.time()
            if remaining > 0:  # the emulated device's switching time (see module docstring)
                time.sleep(remaining)
            self.ocs.settle(rec.end)
            self._batch([light_argv(self.port_intf(p), self.port_intf(rec.circuits[p]))
                         for p in sorted(rec.dark) if p in rec.circuits], "join circuits")
            light_at = time.time()
            self._event("light", circuits=dict(rec.circuits), reason=reason)
            return {"dark_at": dark_at, "light_at": light_at, "dark_ports": sorted(rec.dark),
                    "circuits": dict(rec.circuits)}

    def play(self, schedule: list, t0: float) -> threading.Thread:
        """Apply ``schedule`` = [(seconds after ``t0`` in real-world time, {a: b}), ...] in dilated time
        (wall ``t0 + t x scale``), in order, in a thread; each change is logged with reason 'schedule'."""
        def runner():
            for t, mapping in sorted(schedule, key=lambda e: e[0]):
                if self._stop.wait(max(0.0, t0 + t * self.scale - time.time())):  # deadline of the entry
                    return
                try:
                    self.set_circuits(mapping, reason="schedule")
                except Exception as exc:  # noqa: BLE001 - reported through monitor_error and the scenario
                    self.monitor_error = f"schedule: {type(exc).__name__}: {exc}"
                    self._event("monitor_error", error=self.monitor_error)
                    return
        thread = threading.Thread(target=runner, name=f"{self.name}-schedule", daemon=True)
        self._players.append(thread)
        thread.start()
        return thread

    def _read_monitor(self) -> None:
        """Carrier events of the working port from ``ip -o monitor link`` -> ``self._dark_since``."""
        intf = self.port_intf(self.protection.working)
        for line in self._watcher.stdout:
            dark = link_line_dark(line, intf)
            if dark is None:
                continue
            with self._changed:
                if dark and self._dark_since is None:
                    self._dark_since = time.time()
                    self._event("los_seen", port=self.protection.working)
                elif not dark and self._dark_since is not None:
                    self._dark_since = None
                    self._event("light_seen", port=self.protection.working)
                self._changed.notify_all()

    def _watch(self) -> None:
        """Protection: once the working port has been dark for ``detect_s x scale``, go to standby."""
        group = self.protection
        hold = group.detect_s * self.scale
        reader = threading.Thread(target=self._read_monitor, name=f"{self.name}-monitor", daemon=True)
        reader.start()
        try:
            while not self._stop.is_set():
                with self._changed:
                    since = self._dark_since
                    if since is None or self.ocs.circuits.get(group.common) != group.working:
                        self._changed.wait(0.2)
                        continue
                    left = since + hold - time.time()
                    if left > 0:  # debounce: the emulated detection time
                        self._changed.wait(left)
                        continue
                self._event("los_declared", port=group.working, after_s=time.time() - since)
                others = {a: b for a, b in self.ocs.circuits.items()
                          if a < b and not {a, b} & {group.common, group.working, group.standby}}
                self.set_circuits({**others, group.common: group.standby}, reason="protection")
        except Exception as exc:  # noqa: BLE001 - reported through monitor_error and the scenario
            self.monitor_error = f"{type(exc).__name__}: {exc}"
            self._event("monitor_error", error=self.monitor_error)


def ocs_switch_factory(nodes: dict, scale: float):
    """A Replica ``switch_factory`` for the plan's external switches of role 'ocs': ``nodes`` = {graph node:
    (CircuitSwitch, ProtectionGroup | None)}; ``scale`` = the plan's."""
    def factory(entry):
        if entry.node not in nodes:
            return None
        ocs, group = nodes[entry.node]
        return OcsNode, {"ocs": ocs, "scale": scale, "protection": group, "inNamespace": True}
    return factory
