"""PFC frames: bytes against a frame written by hand from IEEE 802.1Qbb's layout, Scapy's independent
contrib layer, round trips through the struct codec, and tshark decoding them as PFC."""

from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import split_layers
from scapy.utils import import_hexcap, wrpcap

from testbed.pfc.frame import PFC, PFC_DST, MACControl, Pause, decode, encode, from_pause, pfc
from testbed.pfc.state import PauseFrame

# Written by hand from the field layout (802.1Q clause 36 / 802.3 Annex 31D), not by this code:
#   dst 01:80:c2:00:00:01 | src 02:00:00:00:00:01 | 8808 | opcode 0101 | class-enable 0048 (P3, P6)
#   time0..7 = 0000 0000 0000 ffff 0000 0000 0010 0000 | 26 bytes of zeros  -> 60 bytes (no FCS)
HAND = """0x0000:  0180 c200 0001 0200 0000 0001 8808 0101
0x0010:  0048 0000 0000 0000 ffff 0000 0000 0010
0x0020:  0000 0000 0000 0000 0000 0000 0000 0000
0x0030:  0000 0000 0000 0000 0000 0000
"""
SRC = "02:00:00:00:00:01"


def test_built_frame_equals_the_hand_written_bytes():
    raw = import_hexcap(HAND)
    assert len(raw) == 60
    assert bytes(pfc({3: 0xFFFF, 6: 0x10}, src=SRC)) == raw
    assert encode(PauseFrame.of({3: 0xFFFF, 6: 0x10}), SRC) == raw


def test_hand_written_bytes_dissect():
    pkt = Ether(import_hexcap(HAND))
    assert pkt.dst == PFC_DST and pkt.type == 0x8808
    layer = pkt[PFC]
    assert layer.opcode == 0x0101 and int(layer.class_enable) == 0x48
    assert [getattr(layer, f"time{i}") for i in range(8)] == [0, 0, 0, 0xFFFF, 0, 0, 0x10, 0]
    assert layer.to_pause() == PauseFrame.of({3: 0xFFFF, 6: 0x10})
    assert decode(bytes(pkt)) == PauseFrame.of({3: 0xFFFF, 6: 0x10})
    assert "P3=65535" in pkt.summary()


@pytest.fixture
def contrib_mac_control():
    """Scapy's own MAC Control layers (an independent implementation); their bindings are undone after."""
    from scapy.contrib import mac_control as mc
    yield mc
    split_layers(Ether, mc.MACControl, type=0x8808)
    split_layers(Dot1Q, mc.MACControl, type=0x8808)


def test_scapy_contrib_layer_reads_our_frame(contrib_mac_control):
    mc = contrib_mac_control
    raw = bytes(pfc({3: 0xFFFF, 6: 0x10, 0: 0}, src=SRC))
    theirs = mc.MACControlClassBasedFlowControl(raw[14:])
    assert theirs._op_code == 0x0101
    assert (theirs.c0_enabled, theirs.c3_enabled, theirs.c6_enabled, theirs.c7_enabled) == (1, 1, 1, 0)
    assert (theirs.c0_pause_time, theirs.c3_pause_time, theirs.c6_pause_time) == (0, 0xFFFF, 0x10)
    ours = Ether(bytes(Ether(dst=PFC_DST, src=SRC) / mc.MACControlClassBasedFlowControl(
        c3_enabled=1, c3_pause_time=0x1234)))
    assert ours[PFC].to_pause() == PauseFrame.of({3: 0x1234})   # their bytes, our layer (bound first)
    assert decode(bytes(ours)) == PauseFrame.of({3: 0x1234})


def test_round_trips():
    rng = random.Random(7)
    for _ in range(200):
        times = {p: rng.choice((0, 1, rng.randrange(0x10000), 0xFFFF)) for p in range(8) if rng.random() < 0.4}
        f = PauseFrame.of(times)
        wire = encode(f, SRC)
        assert decode(wire) == f
        assert bytes(from_pause(f, SRC)) == wire
        assert Ether(wire)[PFC].to_pause() == f


def test_vlan_tagged_frame_is_padded_to_the_minimum_and_dissects():
    pkt = Ether(dst=PFC_DST, src=SRC) / Dot1Q(vlan=10, prio=3) / PFC(class_enable=0x08, time3=100)
    raw = bytes(pkt)
    assert len(raw) == 60 and raw[16:18] == b"\x88\x08"
    assert Ether(raw)[PFC].time3 == 100


def test_other_mac_control_frames_are_not_pfc():
    pause = Ether(dst=PFC_DST, src=SRC) / Pause(pause_time=0x1234)
    raw = bytes(pause)
    assert len(raw) == 60 and raw[14:18] == bytes.fromhex("00011234")
    back = Ether(raw)
    assert back.haslayer(Pause) and back[Pause].pause_time == 0x1234 and not back.haslayer(PFC)
    assert decode(raw) is None
    other = Ether(bytes(Ether(dst=PFC_DST, src=SRC, type=0x8808) / MACControl(opcode=0x0002)))
    assert type(other.payload) is MACControl and decode(bytes(other)) is None
    assert decode(bytes(Ether() / IP() / UDP())) is None
    assert decode(b"\x00" * 20) is None


def test_tshark_decodes_our_frames_as_pfc(tmp_path):
    assert shutil.which("tshark"), "tshark is missing: make setup installs it (a setup failure, not a skip)"
    frames = [pfc({3: 0xFFFF}, src=SRC), pfc({3: 0}, src=SRC), pfc({3: 0x1234, 6: 7}, src=SRC)]
    control = tmp_path / "bad.pcap"                         # the expert check below can fail: a bad frame
    wrpcap(str(control), [Ether(dst="ff:ff:ff:ff:ff:ff", src=SRC) / PFC(class_enable=0x108, time3=1)])
    bad = subprocess.run(["tshark", "-r", str(control), "-V"], capture_output=True, text=True)
    assert "must be 01-80-C2-00-00-01" in bad.stdout and "must be 0" in bad.stdout
    pcap = tmp_path / "pfc.pcap"
    wrpcap(str(pcap), frames)
    verbose = subprocess.run(["tshark", "-r", str(pcap), "-V"], capture_output=True, text=True)
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout.count("Class Based Flow Control [CBFC] Pause (0x0101)") == 3
    assert "must be" not in verbose.stdout                 # no expert info (bad destination, reserved bits)
    fields = ["macc.opcode", "macc.cbfc.enbv", "macc.cbfc.pause_time.c3", "macc.cbfc.pause_time.c6",
              "macc.cbfc.enbv.c3", "macc.cbfc.enbv.c6"]
    cmd = ["tshark", "-r", str(pcap), "-T", "json"] + [a for f in fields for a in ("-e", f)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    layers = [p["_source"]["layers"] for p in json.loads(done.stdout)]
    assert [int(x["macc.opcode"][0], 0) for x in layers] == [0x0101] * 3
    assert [int(x["macc.cbfc.enbv"][0], 0) for x in layers] == [0x08, 0x08, 0x48]
    assert [int(x["macc.cbfc.pause_time.c3"][0]) for x in layers] == [0xFFFF, 0, 0x1234]
    assert int(layers[2]["macc.cbfc.pause_time.c6"][0]) == 7
    assert layers[2]["macc.cbfc.enbv.c6"] == ["1"] and layers[0]["macc.cbfc.enbv.c6"] == ["0"]
