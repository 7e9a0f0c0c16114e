"""PFC frames on the wire: a Scapy layer and factories (the struct codec lives in testbed.pfc.wire).

IEEE 802.1Qbb (now IEEE 802.1Q clause 36) carries PFC in an IEEE 802.3 MAC Control frame (802.3 clause 31,
Annex 31D for the class-based "PFC" opcode)::

    dst 01:80:C2:00:00:01 | src | type 0x8808 | opcode 0x0101 | class-enable vector (16) |
    time[0] ... time[7] (8 x 16, pause quanta of 512 bit times) | 26 B of zeros | FCS
    = 64 B, the minimum frame; 60 B as AF_PACKET sees it (no FCS)

Bit p of the class-enable vector (the low octet; the high octet is reserved, zero) enables time[p];
time 0 = resume (XON). Scapy's ``scapy.contrib.mac_control`` knows this frame too, but as
``MACControl/MACControlClassBasedFlowControl`` with per-bit fields and a generic opcode dispatch; this layer
mirrors the spec's field widths (a 16-bit vector, eight 16-bit times) and converts to and from the pure
state machine's :class:`~testbed.pfc.state.PauseFrame`. The unit tests check the bytes against a frame
written by hand from the field layout, against Scapy's contrib layer and against tshark.

The per-packet codec (no Scapy) is :mod:`testbed.pfc.wire`. Importing this module binds ethertype 0x8808
(MAC Control) to :class:`MACControl`, which dissects opcode 0x0101 as :class:`PFC` and 0x0001 as
:class:`Pause` (802.3x).
"""

from __future__ import annotations

import struct

from scapy.fields import FlagsField, ShortField, XShortEnumField
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet, bind_bottom_up, bind_top_down

from testbed.pfc.config import PRIORITIES
from testbed.pfc.state import PauseFrame
from testbed.pfc.wire import (  # noqa: F401 - the codec is re-exported next to the layer
    MAC_CONTROL_ETHERTYPE,
    MIN_FRAME_NO_FCS,
    OPCODE_PAUSE,
    OPCODE_PFC,
    PFC_DST,
    decode,
    dscp_of,
    encode,
    priority_of,
)

OPCODES = {OPCODE_PAUSE: "PAUSE", OPCODE_PFC: "PFC"}


class _MACControlPDU(Packet):
    """Shared behaviour: pad the frame to the 60-byte minimum; what follows the PDU is padding."""

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if not pay:
            under = 0
            layer = self.underlayer
            while isinstance(layer, Dot1Q):
                under += 4
                layer = layer.underlayer
            if isinstance(layer, Ether):
                under += 14
            if under + len(pkt) < MIN_FRAME_NO_FCS:
                pkt += b"\x00" * (MIN_FRAME_NO_FCS - under - len(pkt))
        return pkt + pay

    def extract_padding(self, s: bytes):
        return b"", s


class MACControl(_MACControlPDU):
    """A MAC Control PDU of an opcode this module does not dissect further (802.3 clause 31)."""

    name = "MAC Control"
    fields_desc = [XShortEnumField("opcode", 0, OPCODES)]

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args, **kwargs):
        if _pkt and len(_pkt) >= 2:
            opcode = struct.unpack("!H", _pkt[:2])[0]
            if opcode == OPCODE_PFC:
                return PFC
            if opcode == OPCODE_PAUSE:
                return Pause
        return cls


class Pause(_MACControlPDU):
    """IEEE 802.3x PAUSE (802.3 Annex 31B): every priority stops for ``pause_time`` quanta."""

    name = "PAUSE"
    fields_desc = [XShortEnumField("opcode", OPCODE_PAUSE, OPCODES), ShortField("pause_time", 0)]


class PFC(_MACControlPDU):
    """IEEE 802.1Qbb priority-based flow control: per-priority pause times (802.1Q clause 36, 802.3 Annex 31D).

    Fields mirror the frame: ``class_enable`` (16 bits; bits 0..7 enable ``time0``..``time7``, bits 8..15
    reserved) and eight 16-bit pause times in quanta. Build one with :func:`pfc` or :func:`from_pause`.
    """

    name = "PFC"
    fields_desc = ([XShortEnumField("opcode", OPCODE_PFC, OPCODES),
                    FlagsField("class_enable", 0, 16, [f"P{i}" for i in range(PRIORITIES)]
                               + [f"reserved{i}" for i in range(8, 16)])]
                   + [ShortField(f"time{i}", 0) for i in range(PRIORITIES)])

    def mysummary(self):
        on = ", ".join(f"P{p}={getattr(self, f'time{p}')}" for p in range(PRIORITIES)
                       if int(self.class_enable) >> p & 1)
        return f"PFC {on or 'no class enabled'}"

    def to_pause(self) -> PauseFrame:
        """The pure state machine's view: enabled classes and their pause times."""
        return PauseFrame.from_wire(int(self.class_enable), [getattr(self, f"time{i}") for i in range(PRIORITIES)])


bind_top_down(Ether, MACControl, type=MAC_CONTROL_ETHERTYPE)
bind_top_down(Ether, PFC, type=MAC_CONTROL_ETHERTYPE, dst=PFC_DST)
bind_top_down(Ether, Pause, type=MAC_CONTROL_ETHERTYPE, dst=PFC_DST)
bind_top_down(Dot1Q, PFC, type=MAC_CONTROL_ETHERTYPE)
bind_bottom_up(Ether, MACControl, type=MAC_CONTROL_ETHERTYPE)
bind_bottom_up(Dot1Q, MACControl, type=MAC_CONTROL_ETHERTYPE)


def pfc(times: dict, src: str = "02:00:00:00:00:01") -> Ether:
    """A PFC frame pausing each priority in ``times`` for its quanta (0 = XON): ``pfc({3: 0xFFFF})``."""
    return from_pause(PauseFrame.of(times), src)


def from_pause(frame: PauseFrame, src: str = "02:00:00:00:00:01") -> Ether:
    """The Scapy frame of a state-machine :class:`PauseFrame`."""
    q = frame.quanta
    return Ether(dst=PFC_DST, src=src) / PFC(class_enable=frame.class_enable,
                                             **{f"time{i}": q[i] for i in range(PRIORITIES)})
