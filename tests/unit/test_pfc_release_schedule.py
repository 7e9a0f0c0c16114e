"""The schedule a PFC link core's lateness is measured against (issue 16): the model's own release times.

The forwarding loop counts a frame late when its send begins more than the tolerance after the release time
the model gave it (``emulator_late``, the same rule as the plain core). In the PFC path that time is decided
at the frame's *start*, so a frame held by a PAUSE gets XON + delay + len/rate + delay (the XON acts when
it has crossed the cable back to the sender), not arrival + len/rate + delay: releasing it then is on time.
Both the C core (``linkcore pfctrace``) and the Python reference must give these times;
tests/integration/test_pfc_lateness.py checks the forwarding loop's counter against them.
"""

from __future__ import annotations

import random

import pytest

from testbed.dilation import Dilation
from testbed.links.core import CoreBuildError
from testbed.links.model import LinkParams
from testbed.pfc.config import PfcConfig
from testbed.pfc.link import PfcDirection, run_core_trace, trace_lines
from testbed.pfc.state import PauseFrame
from testbed.pfc.wire import encode

RATE = 10e6
DELAY = 0.005
PARAMS = LinkParams(rate_bps=RATE, delay_s=DELAY, limit=1e6, limit_unit="bytes")
PFC = PfcConfig(priorities=(3,), xoff_bytes=100e3, xon_bytes=90e3)
SRC = "02:00:00:00:00:01"
SER = 1000 / (RATE / 8)   # 0.8 ms per 1000 B frame


def _frame(tos: int) -> str:
    ip_len = 986
    ip = bytes([0x45, tos]) + ip_len.to_bytes(2, "big") + bytes(4) + bytes([64, 17, 0, 0]) + bytes(8)
    return (bytes(6) + bytes.fromhex("020000000002") + b"\x08\x00" + ip + bytes(ip_len - 20)).hex()


TRACE = [
    f"0.0 rx {encode(PauseFrame(((3, 0xFFFF),)), '02:00:00:00:00:09').hex()}",   # priority 3 paused from 5 ms
    f"0.010 arrive {_frame(26 << 2)}",                                           # held
    f"0.011 arrive {_frame(26 << 2)}",                                           # held behind it
    f"0.012 arrive {_frame(0)}",                                                 # priority 0 flows
    f"0.300 rx {encode(PauseFrame(((3, 0),)), '02:00:00:00:00:09').hex()}",      # XON, acts at 0.305
    "1.0 advance",
]


def _releases(lines: list[str]) -> list[float]:
    out = []
    for line in lines[:len(TRACE)]:
        parts = line.split()
        out += [float(parts[i + 1]) for i, x in enumerate(parts) if x == "tx"]
    return out


@pytest.fixture(scope="module")
def both():
    py = trace_lines(PfcDirection(PARAMS, PFC, RATE, 50e3, Dilation(1.0), random.Random(1)), TRACE, SRC)
    try:
        c = run_core_trace(PARAMS, PFC, RATE, 50e3, 1.0, 1, TRACE, SRC)
    except CoreBuildError as exc:
        pytest.fail(f"the C core did not build ({exc}): make setup installs the compiler")
    return py, c


def test_a_paused_frame_is_scheduled_from_the_xon_not_from_its_arrival(both):
    for lines in both:
        rel = _releases(lines)
        assert len(rel) == 3
        # priority 0 at once: arrival + serialisation + delay
        assert rel[0] == pytest.approx(0.012 + SER + DELAY)
        # priority 3 from the XON's arrival at the sender (one cable after it was read), back to back: a send
        # at these times is on time (0 late), although 0.29 s after arrival + serialisation + delay
        assert rel[1] == pytest.approx(0.300 + DELAY + SER + DELAY)
        assert rel[2] == pytest.approx(0.300 + DELAY + 2 * SER + DELAY)


def test_the_c_core_and_the_reference_give_the_same_schedule(both):
    py, c = both
    assert c == py
