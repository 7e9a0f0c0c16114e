"""BFD on a replica's inter-switch links (Open vSwitch's own BFD, RFC 5880 asynchronous mode).

A link whose carrier stays up but which stops carrying packets (a dead transceiver lane, a wedged
delay line, a filter dropping everything) is invisible to port-status; BFD sees it. OVS ties a port's
liveness to its BFD session: fast-failover buckets skip a port whose session is down, and the port's
``OFPPS_LIVE`` bit drops in a port-status message, which the controller treats as the link going down
(:meth:`controllers.core.ControllerCore.port_status`)::

    enable_bfd(rep, [("a0", "cr0"), ...], interval_s=0.05, mult=3, scale=plan.scale)
        # ovs-vsctl set Interface a0-eth3 bfd:enable=true bfd:min_tx=50 bfd:min_rx=50 ... (x scale)

Intervals are the real fabric's, dilated like every other timer (x scale); OVS takes whole milliseconds.
"""

from __future__ import annotations

from testbed.emu import ops
from testbed.errors import SpecError


def bfd_settings(interval_s: float, mult: int, scale: float = 1.0) -> dict:
    """OVS ``bfd:`` keys for a real-world ``interval_s`` x ``mult`` detection time, dilated by ``scale``.

    Raises:
        SpecError: naming the field, for an interval that rounds below 1 ms or a multiplier out of 1..255.
    """
    ms = round(interval_s * scale * 1e3)
    if ms < 1:
        raise SpecError("bfd.interval", f"{interval_s * 1e3:g} ms x scale {scale:g} is under OVS's 1 ms floor")
    if not 1 <= mult <= 255:
        raise SpecError("bfd.mult", f"must be 1..255, got {mult}")
    return {"enable": "true", "min_tx": str(ms), "min_rx": str(ms), "decay_min_rx": "0", "mult": str(mult)}


def bfd_argv(intfs, settings: dict | None) -> list[str]:
    """One ovs-vsctl transaction setting (or, with ``settings=None``, clearing) BFD on every interface."""
    argv = ["ovs-vsctl", "--timeout=10"]
    for intf in intfs:
        ops.check_ifname(intf)
        if settings is None:
            argv += ["--", "clear", "Interface", intf, "bfd"]
        else:
            argv += ["--", "set", "Interface", intf, *(f"bfd:{k}={v}" for k, v in settings.items())]
    return argv


def link_intfs(rep, links) -> list[str]:
    """Both switch-side interfaces of every link ``(u, v)``."""
    return [rep.intf_name(a, b) for u, v in links for a, b in ((u, v), (v, u))]


def enable_bfd(rep, links, interval_s: float = 0.05, mult: int = 3, scale: float = 1.0) -> list[str]:
    """Turn BFD on at both ends of each link; returns the interfaces."""
    intfs = link_intfs(rep, links)
    ops.run(bfd_argv(intfs, bfd_settings(interval_s, mult, scale)), what=f"enable BFD on {len(intfs)} ports")
    return intfs


def parse_bfd_show(text: str) -> dict:
    """``ovs-appctl bfd/show`` of one interface as a dict: ``state``, ``remote_state`` and the negotiated
    ``tx_ms`` / ``rx_ms`` / ``detect_mult`` (numbers; absent when OVS did not print them)."""
    keys = {"Local Session State": "state", "Remote Session State": "remote_state", "TX Interval": "tx_ms",
            "RX Interval": "rx_ms", "Detect Multiplier": "detect_mult"}
    out: dict = {}
    for line in text.splitlines():
        label, sep, value = line.strip().partition(":")
        name = keys.get(label.strip())
        if not sep or name is None or name in out:
            continue
        value = value.strip()
        if name.endswith("state"):
            out[name] = value
        else:
            digits = "".join(c for c in value if c.isdigit())
            if digits:
                out[name] = int(digits)
    return out


def bfd_timers(intf: str) -> dict:
    """The session of ``intf`` as OVS runs it now (see :func:`parse_bfd_show`)."""
    ops.check_ifname(intf)
    res = ops.run(["ovs-appctl", "-t", "ovs-vswitchd", "bfd/show", intf], what=f"read BFD timers of {intf}")
    return parse_bfd_show(res.stdout)


def bfd_ready(intfs, interval_s: float, scale: float = 1.0) -> bool:
    """Every session is up *and* runs at the configured interval.

    A session comes up on the slow start-up rate (RFC 5880 6.8.3: at least 1 s between packets until it
    is up) and only then negotiates the fast one with a poll sequence; until that ends, detection takes
    mult x 1 s. A failure injected between "up" and the end of the poll sequence is detected seconds late.
    """
    want = round(interval_s * scale * 1e3)
    for intf in intfs:
        t = bfd_timers(intf)
        if t.get("state") != "up" or t.get("tx_ms") != want or t.get("rx_ms") != want:
            return False
    return True
