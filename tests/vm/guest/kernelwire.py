"""Two namespaces joined by one veth whose egresses carry the kernel link backend (root glue).

::

    netns {p}A [10.78.0.1] ==veth {p}a -- {p}b (tc netem -> tbf -> red on each egress)== [10.78.0.2] netns {p}B

The kernel counterpart of :mod:`testbed.links.wire` (the userspace delay line): same addresses
scheme, static neighbours (so no ARP crosses the delayed link), the same UDP probe
(:mod:`testbed.links.probe`), plus the qdisc counters (``tc -s -j``) that attribute every drop and mark.
Used by the in-VM kernel tests (tests/vm/guest) and the link fidelity table (scripts/vm/link_fidelity.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from testbed.emu import ops
from testbed.emu.registry import RunRegistry
from testbed.errors import EmulationError
from testbed.links import tc
from testbed.links.model import LinkParams
from testbed.poll import poll

IP_A, IP_B = "10.78.0.1", "10.78.0.2"
MAC_A, MAC_B = "02:78:00:00:00:01", "02:78:00:00:00:02"
REPO = Path(__file__).resolve().parents[3]


class KernelWire:
    """Host A -- veth with tc -- host B, recorded in ``run`` (removed when it ends)."""

    def __init__(self, run: RunRegistry, workdir: Path):
        p = f"kw{os.getpid() % 10000:04d}"
        self.run, self.workdir = run, Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ns = {"a": f"{p}A", "b": f"{p}B"}
        self.dev = {"a": f"{p}a", "b": f"{p}b"}
        self.ip_a, self.ip_b = IP_A, IP_B
        run.add_netns(self.ns["a"])
        run.add_netns(self.ns["b"])
        run.add_veth(self.dev["a"], self.dev["b"], ns_a=self.ns["a"], ns_b=self.ns["b"])
        for side, ip, mac, peer_ip, peer_mac in (("a", IP_A, MAC_A, IP_B, MAC_B), ("b", IP_B, MAC_B, IP_A, MAC_A)):
            dev, ns = self.dev[side], self.ns[side]
            # No IPv6 (router/neighbour solicitations): only the probes cross the link, so every qdisc drop
            # is a lost probe.
            for key in ("all", dev):
                ops.run(ops.netns_exec_argv(["sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1"], ns),
                        what=f"disable IPv6 in {ns}", check=False)
            for argv in (["ip", "link", "set", dev, "address", mac], ["ip", "addr", "add", f"{ip}/24", "dev", dev],
                         ["ip", "neigh", "replace", peer_ip, "lladdr", peer_mac, "dev", dev, "nud", "permanent"]):
                ops.run(ops.in_netns(argv, ns), what=f"configure {dev} in {ns}")

    def shape(self, params: LinkParams, sides=("a", "b")) -> None:
        """Replace both egresses' qdiscs: ``params`` (emulated) on ``sides``, nothing on the others."""
        for side in ("a", "b"):
            subprocess.run(tc.clear_cmd(self.dev[side], self.ns[side]), capture_output=True)
        for side in sides:
            for argv in tc.link_cmds(self.dev[side], params, netns=self.ns[side]):
                ops.run(argv, what=f"tc on {self.dev[side]}")

    def qdiscs(self, side: str) -> dict[str, dict]:
        """``{kind: tc -s -j stats}`` of ``side``'s egress qdiscs (netem, tbf, red)."""
        out = subprocess.run(["ip", "netns", "exec", self.ns[side], "tc", "-s", "-j", "qdisc", "show", "dev",
                              self.dev[side]], capture_output=True, text=True, check=True).stdout
        return {q["kind"]: q for q in json.loads(out)}

    def exec_argv(self, side: str, argv: list[str]) -> list[str]:
        return ops.netns_exec_argv(argv, self.ns[side])

    def probe(self, count: int, pps: float, size: int, tos: int = 0, port: int = 5201,
              timeout: float = 180.0) -> tuple[dict, dict]:
        """``count`` UDP probes A -> B; returns (sender, receiver) documents (see testbed.links.probe)."""
        ready, out = self.workdir / "probe.ready", self.workdir / "probe.json"
        for f in (ready, out):
            f.unlink(missing_ok=True)
        py = [sys.executable, "-m", "testbed.links.probe"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        recv = subprocess.Popen(self.exec_argv("b", py + ["recv", "--port", str(port), "--ready", str(ready),
                                                          "--out", str(out), "--count", str(count),
                                                          "--idle", "2", "--timeout", str(timeout)]), env=env)
        try:
            poll(ready.exists, timeout=30, interval=0.05, what="probe receiver to bind")
            sent = subprocess.run(self.exec_argv("a", py + ["send", "--dst", IP_B, "--port", str(port), "--count",
                                                            str(count), "--pps", str(pps), "--size", str(size),
                                                            "--tos", str(tos)]),
                                  env=env, capture_output=True, text=True, timeout=timeout, check=True)
            recv.wait(timeout=timeout)
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
        if recv.returncode != 0 or not out.exists():
            raise EmulationError(f"probe receiver failed with status {recv.returncode}")
        return json.loads(sent.stdout), json.loads(out.read_text())
