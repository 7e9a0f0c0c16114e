"""The trace reference (what the compiled link core must reproduce), against outputs derived by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from testbed.pfc.config import PfcConfig
from testbed.pfc.trace import TracePair, run

SRC = "02:00:00:00:00:01"
ROCE = bytes(Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b") / IP(tos=26 << 2 | 2) / UDP(dport=4791)
             / Raw(b"\x00" * 958))                          # 1000 bytes, DSCP 26 -> priority 3
LOSSY = bytes(Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b") / IP(tos=0) / UDP() / Raw(b"\x00" * 958))
PAUSE_HEX = "0180c2000001020000000001880801010008000000000000ffff" + "00" * 8 + "00" * 26   # P3 0xffff
XON_HEX = "0180c2000001020000000001880801010008" + "00" * 16 + "00" * 26                  # P3 0
PEER_PAUSE_1000 = "0180c200000102000000000288080101000800000000000003e8" + "00" * 8 + "00" * 26
CONFIG = PfcConfig(priorities=(3,), xoff_bytes=3000, xon_bytes=1000)
REFRESH = 0.5 * (65535 * 512 / 100e9)                        # half of 0xffff quanta at 100G


def test_hand_derived_trace():
    assert len(ROCE) == 1000 and len(bytes.fromhex(PAUSE_HEX)) == 60
    f, lossy = ROCE.hex(), LOSSY.hex()
    nxt = f"next={2e-6 + REFRESH:.17g}"
    trace = [f"0 arrive {f}", f"1e-6 arrive {f}", f"2e-6 arrive {f}",          # 1000, 2000, 3000 = xoff
             f"3e-6 arrive {f}", f"3e-6 arrive {f}", f"3e-6 arrive {f}",       # 4000, 5000 = limit, drop
             f"4e-6 arrive {lossy}",                                          # lossy: not accounted
             f"5e-6 depart {f}", f"5e-6 depart {f}", f"5e-6 depart {f}",       # 4000, 3000, 2000
             f"6e-6 depart {f}",                                              # 1000 = xon: XON
             f"10e-6 rx {PEER_PAUSE_1000}", f"10e-6 gate {f}", f"10.5e-6 gate {lossy}",
             f"16e-6 gate {f}", f"16e-6 rx {lossy}",
             "# a second pause, refreshed by the timer", f"20e-6 arrive {f}", f"20e-6 arrive {f}",
             f"{20e-6 + REFRESH!r} tick"]
    out = run(trace, TracePair(CONFIG, 100e9, 2000, src=SRC))
    assert out[:19] == [
        "fwd next=-", "fwd next=-", f"fwd pfc={PAUSE_HEX} {nxt}",
        f"fwd {nxt}", f"fwd {nxt}", f"drop pfc_headroom {nxt}",
        f"fwd {nxt}",
        f"- {nxt}", f"- {nxt}", f"- {nxt}",
        f"- pfc={XON_HEX} next=-",
        "pfc next=-", f"hold {10e-6 + 1000 * 512 / 100e9:.17g} next=-", "send next=-",
        "send next=-", "data next=-",
        "fwd next=-", f"fwd pfc={PAUSE_HEX} next={20e-6 + REFRESH:.17g}",
        f"- pfc={PAUSE_HEX} next={20e-6 + REFRESH + REFRESH:.17g}",
    ]
    ingress = json.loads(out[19].split(" ", 1)[1])["3"]
    assert (ingress["pause_sent"], ingress["xon_sent"], ingress["drop_pfc_headroom"]) == (3, 1, 1)
    assert ingress["bytes"] == 3000 and ingress["max_bytes"] == 5000
    egress = json.loads(out[20].split(" ", 1)[1])["3"]
    assert egress["pause_received"] == 1 and egress["paused_s"] == pytest.approx(5.12e-6)


def test_bad_lines_are_named():
    pair = TracePair(CONFIG, 100e9, 2000)
    for line in ("0", "0 arrive", "0 fly 00", "x arrive 00"):
        with pytest.raises(ValueError):
            pair.step(line)
    pair.step(f"1 arrive {ROCE.hex()}")
    with pytest.raises(ValueError, match="backwards"):
        pair.step(f"0.5 depart {ROCE.hex()}")


def test_command_line_replays_stdin():
    cfg = json.dumps(CONFIG.to_dict())
    done = subprocess.run([sys.executable, "-m", "testbed.pfc.trace", "--config", cfg, "--rate", "100G",
                           "--headroom", "2000", "--scale", "1000"],
                          input=f"0 arrive {ROCE.hex()}\n0 arrive {ROCE.hex()}\n0 arrive {ROCE.hex()}\n",
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[2] == f"fwd pfc={PAUSE_HEX} next={1000 * REFRESH:.17g}"   # refresh dilated x1000
    assert lines[3].startswith("ingress ") and lines[4].startswith("egress ")
