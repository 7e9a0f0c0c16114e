"""PFC headroom from physics: the bytes that still arrive after a port decides to send PAUSE.

When the ingress queue of a lossless priority reaches XOFF, these keep arriving (IEEE 802.1Qbb
Annex N "PFC delay model"; the same terms as Cisco's PFC white paper and SONiC's headroom calculator)::

    receiver R                                     sender S
    XOFF reached ---- the frame that crossed XOFF   (the test is per frame: up to one frame above XOFF)
                ---- own max frame on the wire --->            R may be mid-frame: PAUSE waits behind it
                ---- PAUSE (64 B + 20 B preamble/IFG) ----->
                ---- cable, one way (5 us/km) ------------->    PAUSE arrives at S
                                                  response      S's MAC reacts (IEEE 802.3 31B.3.7)
                <--- S's max frame, already started --------    S finishes the frame it began
                <--- cable, one way: bytes already in flight
    headroom = 3 * frame(MTU) + PAUSE + 2 * cable * rate + response [+ 2 * interface delay * rate]

with frame(MTU) = MTU + 38 (Ethernet header and FCS 18, preamble/SFD 8, inter-frame gap 12). The response
time defaults to the IEEE 802.3 Annex 31B.3.7 upper bound per speed, in pause quanta (512 bit times), as
SONiC's ``buffer_headroom_mellanox.lua`` tabulates it: 394 quanta at 100G (25,216 B), 905 at 400G
(57,920 B). Everything is in real units: headroom is a property of the real fabric, and bytes are kept
unchanged by time dilation, so the emulated port reserves the same bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from testbed.pfc.config import FRAME_OVERHEAD, PfcConfig
from testbed.units import FIBRE_DELAY_S_PER_M

#: PAUSE/PFC frame on the wire: 64 B minimum frame + preamble/SFD 8 + inter-frame gap 12.
PAUSE_WIRE_BYTES = 84

#: Bits in one pause quantum (IEEE 802.3 31B.2: 512 bit times).
QUANTUM_BITS = 512

#: Upper bound of the peer's response to a PAUSE, in pause quanta, by operating speed in Mb/s
#: (IEEE 802.3 Annex 31B.3.7, as tabulated in SONiC's buffer_headroom_mellanox.lua).
RESPONSE_QUANTA = {100: 1, 1000: 2, 10_000: 67, 25_000: 80, 40_000: 118, 50_000: 147, 100_000: 394,
                   200_000: 453, 400_000: 905, 800_000: 905}


def response_quanta(rate_bps: float) -> int:
    """Response bound in quanta for a speed: the tabulated speed at or above ``rate_bps`` (the fastest
    entry beyond the table), so a rate between two entries gets the larger, safer figure."""
    mbps = rate_bps / 1e6
    for speed in sorted(RESPONSE_QUANTA):
        if mbps <= speed * (1 + 1e-9):
            return RESPONSE_QUANTA[speed]
    return RESPONSE_QUANTA[max(RESPONSE_QUANTA)]


@dataclass(frozen=True)
class Headroom:
    """The terms of one port's headroom, in bytes (see the module docstring)."""

    rate_bps: float
    one_way_delay_s: float
    crossing_frame: float
    own_frame: float
    pause_frame: float
    cable: float
    response: float
    peer_frame: float
    interface: float = 0.0

    @property
    def total(self) -> int:
        """Bytes to reserve above XOFF, rounded up to a whole byte."""
        return math.ceil(self.crossing_frame + self.own_frame + self.pause_frame + self.cable + self.response + self.peer_frame
                         + self.interface - 1e-6)

    def to_dict(self) -> dict:
        return {"bytes": self.total, "rate_bps": self.rate_bps, "one_way_delay_s": self.one_way_delay_s,
                "terms": {"crossing_frame": self.crossing_frame, "own_frame": self.own_frame, "pause_frame": self.pause_frame, "cable": self.cable,
                          "response": self.response, "peer_frame": self.peer_frame, "interface": self.interface}}


def headroom(rate_bps: float, one_way_delay_s: float = 0.0, mtu: int = 1500, response_time_s: float | None = None,
             interface_delay_s: float = 0.0) -> Headroom:
    """Headroom of a port at ``rate_bps`` whose cable has ``one_way_delay_s`` of propagation.

    Args:
        rate_bps: real line rate.
        one_way_delay_s: propagation delay of the cable, one way (5 us/km of fibre).
        mtu: the largest IP packet; a frame on the wire is ``mtu + 38`` bytes.
        response_time_s: the peer's reaction time to a PAUSE; default IEEE 802.3 31B.3.7 for the speed.
        interface_delay_s: PHY/MAC latency of each end (counted twice, once per direction); default 0.

    Raises:
        ValueError: a non-positive rate or a negative delay.
    """
    if not rate_bps > 0:
        raise ValueError(f"rate must be positive, got {rate_bps!r}")
    if one_way_delay_s < 0 or interface_delay_s < 0 or (response_time_s is not None and response_time_s < 0):
        raise ValueError("delays must not be negative")
    Bps = rate_bps / 8
    frame = float(mtu + FRAME_OVERHEAD)
    response = (response_time_s * Bps if response_time_s is not None
                else response_quanta(rate_bps) * QUANTUM_BITS / 8)
    return Headroom(rate_bps=rate_bps, one_way_delay_s=one_way_delay_s, crossing_frame=frame, own_frame=frame,
                    pause_frame=float(PAUSE_WIRE_BYTES), cable=2 * one_way_delay_s * Bps, response=response,
                    peer_frame=frame, interface=2 * interface_delay_s * Bps)


def headroom_for_distance(rate_bps: float, distance_m: float, mtu: int = 1500, **kwargs) -> Headroom:
    """:func:`headroom` for a fibre of ``distance_m`` (5 us/km one way)."""
    return headroom(rate_bps, distance_m * FIBRE_DELAY_S_PER_M, mtu, **kwargs)


def port_headrooms(G: nx.Graph, pfc: PfcConfig, mtu: int | None = None) -> dict:
    """Headroom of every port of the fabric: ``{node: {port: Headroom-or-fixed dict}}``.

    Both ends of a link see the same cable and rate, so they get the same figure. A fixed
    ``pfc.headroom`` is reported as given (with what ``auto`` would have computed, to compare). When the
    graph has a per-port ``buffer_bytes``, ``fits_buffer`` says whether xoff + headroom fit in it (one
    lossless priority): a port where it does not cannot be lossless under a sustained incast.
    """
    mtu = mtu if mtu is not None else G.graph.get("mtu", 1500)
    buffer = G.graph.get("buffer_bytes")
    out: dict = {}
    for a, b, d in G.edges(data=True):
        h = headroom(d["rate_bps"], d.get("delay_s") or 0.0, mtu)
        doc = h.to_dict()
        if pfc.headroom_bytes is not None:
            doc = {"bytes": pfc.headroom_bytes, "fixed": True, "auto_bytes": h.total, "rate_bps": h.rate_bps,
                   "one_way_delay_s": h.one_way_delay_s}
        if buffer:
            doc["fits_buffer"] = pfc.xoff_bytes + doc["bytes"] <= buffer
        for node in (a, b):
            out.setdefault(node, {})[d["ports"][node]] = doc
    return out
