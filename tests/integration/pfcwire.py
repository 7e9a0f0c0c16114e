"""PFC frames in a capture, as tshark (an independent dissector) decodes them: what the PFC tests check
their link cores' PAUSE/XON counters against."""

from __future__ import annotations

import json
import subprocess

#: tshark's fields of a Class Based Flow Control frame (priority 3's pause time).
FIELDS = ("eth.dst", "eth.src", "macc.opcode", "macc.cbfc.enbv", "macc.cbfc.pause_time.c3")


def decode_pfc(pcap) -> list[dict]:
    """Every frame of ``pcap`` as ``{field: [value]}`` of :data:`FIELDS` (tshark must run cleanly)."""
    done = subprocess.run(["tshark", "-r", str(pcap), "-T", "json", *[a for f in FIELDS for a in ("-e", f)]],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [p["_source"]["layers"] for p in json.loads(done.stdout or "[]")]
