"""Capability probes: what this machine can emulate, found by trying, and the backends picked from it.

Each probe *does* the thing (creates a namespace, a veth, a netem qdisc, an OVS bridge on the kernel
datapath ...) under uniquely named objects recorded in a :class:`~testbed.emu.RunRegistry`, and reports
how it knew. The rest of the code asks :func:`capabilities` (cached per process) which backend to use::

    capabilities() -> {"capabilities": {NAME: {"present": bool, "detail": str}},
                       "backends": {"switch": ovs-kernel|ovs-user|bmv2-only|none,
                                    "delay": netem|userspace|none, "ecn": red|userspace|bmv2|none,
                                    "rdma": soft}}

NAME is one of :data:`NAMES`.  :func:`pick_backends` is the pure decision, unit-tested.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

NAMES = ("root", "netns", "veth", "netem", "red", "ovs_kernel", "ovs_user", "bmv2", "p4c", "rxe", "tshark",
         "link_core")
NEEDS_ROOT = ("netns", "veth", "netem", "red", "ovs_kernel", "ovs_user", "rxe")


def _cap(present: bool, detail: str) -> dict:
    return {"present": bool(present), "detail": detail}


def _try(argv: list[str], timeout: float = 15.0) -> tuple[bool, str]:
    """Run argv; (succeeded, last line of its output or error)."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return False, f"{argv[0]} not found"
    except subprocess.TimeoutExpired:
        return False, f"`{' '.join(argv)}` timed out"
    lines = [ln.strip() for ln in (res.stderr + "\n" + res.stdout).splitlines() if ln.strip()]
    return res.returncode == 0, (lines[-1] if lines else f"exit {res.returncode}")


def pick_backends(caps: dict) -> dict:
    """Backends from capabilities (pure).

    switch: OVS kernel datapath > OVS userspace datapath > BMv2 only > none.
    delay:  tc netem in the kernel > a userspace delay line (needs veth) > none.
    ecn:    tc RED with ecn > userspace delay-line marking (needs veth) > BMv2 P4 marking > none.
    rdma:   the testbed's userspace soft-RDMA, always: it is the only endpoint ``testbed rdma`` drives.
            rdma_rxe is probed and reported (the VM pair tests run rdma-core's verbs over it) but not
            picked until ``testbed rdma`` can run over it (issue 14).
    """
    has = {name: caps.get(name, {}).get("present", False) for name in NAMES}
    if has["ovs_kernel"]:
        switch = "ovs-kernel"
    elif has["ovs_user"]:
        switch = "ovs-user"
    elif has["bmv2"] and has["p4c"]:
        switch = "bmv2-only"
    else:
        switch = "none"
    delay = "netem" if has["netem"] else ("userspace" if has["veth"] else "none")
    if has["red"]:
        ecn = "red"
    elif has["veth"]:
        ecn = "userspace"
    elif has["bmv2"] and has["p4c"]:
        ecn = "bmv2"
    else:
        ecn = "none"
    return {"switch": switch, "delay": delay, "ecn": ecn, "rdma": "soft"}


def _version(binary: str) -> dict:
    path = shutil.which(binary)
    if not path:
        return _cap(False, f"{binary} not on PATH (sudo make setup)")
    try:
        res = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _cap(False, f"{path} --version failed: {exc}")
    lines = [ln.strip() for ln in (res.stdout + "\n" + res.stderr).splitlines()
             if any(c.isdigit() for c in ln) and "Running as" not in ln and ln != binary]
    if res.returncode != 0 or not lines:
        return _cap(False, f"{path} --version failed: exit {res.returncode}")
    return _cap(True, f"{path}: {lines[0]}")


def _link_core() -> dict:
    """Which link core the userspace link nodes run: present when it is the compiled one."""
    from testbed.links.core import selected_core

    core, detail = selected_core(warn=False)
    return _cap(core != "python", f"link core {core}: {detail}")


def _probe_root_things(run, tag: str) -> dict:
    """The probes that create kernel/OVS objects (root only), all named ``tbd<tag>...``."""
    from testbed.emu import ops

    out = {}
    ns = f"tbd{tag}"
    run.record_netns(ns)
    ok, line = _try(["ip", "netns", "add", ns])
    out["netns"] = _cap(ok, "created a network namespace (ip netns add)" if ok else f"ip netns add: {line}")
    a, b = f"tbd{tag}a", f"tbd{tag}b"
    run.record_links([a, b])
    ok, line = _try(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
    out["veth"] = _cap(ok, "created a veth pair" if ok else f"ip link add type veth: {line}")
    if ok:
        ok, line = _try(["tc", "qdisc", "add", "dev", a, "root", "netem", "delay", "1ms"])
        out["netem"] = _cap(ok, "tc qdisc add netem delay 1ms worked" if ok else f"tc netem: {line}")
        ok, line = _try(["tc", "qdisc", "replace", "dev", a, "root", "red", "limit", "400000", "min", "30000",
                         "max", "90000", "avpkt", "1000", "burst", "55", "ecn", "bandwidth", "10Mbit",
                         "probability", "0.1"])
        out["red"] = _cap(ok, "tc qdisc red ecn worked (kernel ECN marking)" if ok else f"tc red ecn: {line}")
        if shutil.which("rdma"):
            ok, line = _try(["rdma", "link", "add", f"tbd{tag}r", "type", "rxe", "netdev", a])
            if ok:
                _try(["rdma", "link", "delete", f"tbd{tag}r"])
            out["rxe"] = _cap(ok, "rdma link add type rxe worked" if ok else f"rdma link add type rxe: {line}")
        else:
            present = os.path.isdir("/sys/module/rdma_rxe")
            out["rxe"] = _cap(present, "rdma_rxe module loaded" if present
                              else "no `rdma` tool and no rdma_rxe module loaded")
    else:
        for name in ("netem", "red", "rxe"):
            out[name] = _cap(False, "not probed: creating a veth failed")
    ok, line = _try(["ovs-vsctl", "--timeout=5", "show"])
    if not ok:
        out["ovs_user"] = _cap(False, f"ovs-vswitchd not reachable: {line}")
        out["ovs_kernel"] = _cap(False, "not probed: ovs-vswitchd not reachable")
        return out
    for key, dp, extra in (("ovs_user", "netdev", ["--", "set", "bridge", f"tbd{tag}u", "datapath_type=netdev"]),
                           ("ovs_kernel", "system", [])):
        br = f"tbd{tag}{key[4]}"
        run.record_bridge(br)
        run.record_links([br])
        res = subprocess.run(["ovs-vsctl", "--timeout=10", "add-br", br] + extra, capture_output=True, text=True)
        err = res.stderr.strip().splitlines()
        port = subprocess.run(["ovs-vsctl", "--timeout=5", "get", "Interface", br, "ofport"],
                              capture_output=True, text=True).stdout.strip()
        ok = res.returncode == 0 and not any("Error" in ln for ln in err) and port not in ("", "[]", "-1")
        out[key] = _cap(ok, f"ovs-vsctl add-br with datapath_type={dp} worked" if ok
                        else f"ovs-vsctl add-br datapath_type={dp}: {err[0] if err else 'no OpenFlow port'}")
        subprocess.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", br], capture_output=True)
        if dp == "netdev":
            ops.run(["ip", "link", "del", br], what="remove probe tap", check=False)
    return out


@functools.lru_cache(maxsize=1)
def capabilities() -> dict:
    """Probe everything once per process; see the module docstring for the shape."""
    from testbed.emu.registry import RunRegistry

    caps = {"root": _cap(os.geteuid() == 0, f"effective uid {os.geteuid()}")}
    if caps["root"]["present"]:
        with RunRegistry("doctor", exclusive=False) as run:
            caps.update(_probe_root_things(run, f"{os.getpid() % 100000}"))
    else:
        for name in NEEDS_ROOT:
            caps[name] = _cap(False, "not probed: needs root (sudo testbed doctor)")
    fast = shutil.which("simple_switch_fast")
    caps["bmv2"] = _version("simple_switch")
    if caps["bmv2"]["present"] and fast:
        caps["bmv2"]["detail"] += f"; fast build {fast}"
    caps["p4c"] = _version("p4c-bm2-ss")
    caps["tshark"] = _version("tshark")
    caps["link_core"] = _link_core()
    ordered = {name: caps[name] for name in NAMES}
    return {"capabilities": ordered, "backends": pick_backends(ordered)}


def plan_capabilities():
    """:class:`testbed.plan.Capabilities` for :func:`testbed.plan.plan_replica`: probed once (root), as data."""
    from testbed.plan.alloc import tcp_ports_in_use
    from testbed.plan.capabilities import Capabilities

    return Capabilities.from_doctor(capabilities(), tcp_ports_in_use())
