"""One direction's PFC pair driven by a text trace: the reference the compiled link core must reproduce.

Like ``linkcore trace`` for :class:`testbed.links.queue.Direction`, this replays events with their times and
prints the decisions, so a C implementation can be diffed against the Python one line by line::

    input (emulated seconds; frames in hex)        output (one line per input line)
    T arrive FRAME   frame enters the buffer       fwd | drop pfc_headroom      [pfc=FRAME ...] next=T|-
    T depart FRAME   frame left the buffer         -                            [pfc=FRAME ...] next=T|-
    T tick           the refresh timer fired       -                            [pfc=FRAME ...] next=T|-
    T rx FRAME       frame from the downstream     pfc (consumed) | data (forward it)           next=T|-
    T gate FRAME     may this frame start now?     send | hold RESUME_AT | drop                 next=T|-
    end of input                                    ingress {json}  and  egress {json}

``pfc=`` frames go upstream (out of the interface the data came in on); ``next`` is when ``tick`` is due.
The priority of a data frame is its DSCP through the map (:func:`testbed.pfc.wire.priority_of`); its
length is its byte count as captured (no FCS), the same bytes the link model counts.

    python -m testbed.pfc.trace --config '{"priorities": [3], "xoff_bytes": 10000, "xon_bytes": 6000}' \\
        --rate 100G --headroom 4000 --scale 1000 --src 02:00:00:00:00:01 < trace.txt
"""

from __future__ import annotations

import argparse
import json
import sys

from testbed.dilation import Dilation
from testbed.pfc.config import PfcConfig
from testbed.pfc.state import HOLD, PfcEgress, PfcIngress
from testbed.pfc.wire import decode, encode, priority_of
from testbed.units import parse_rate, parse_size


class TracePair:
    """PfcIngress + PfcEgress of one direction, fed one trace line at a time."""

    def __init__(self, config: PfcConfig, rate_bps: float, headroom_bytes: float, dilation: Dilation | None = None,
                 src: str = "02:00:00:00:00:01"):
        self.config = config
        self.src = src
        self.ingress = PfcIngress(config, rate_bps, headroom_bytes, dilation)
        self.egress = PfcEgress(config, rate_bps, dilation)
        self.now = 0.0

    def _frames(self, frames) -> list[str]:
        return [f"pfc={encode(f, self.src).hex()}" for f in frames]

    def step(self, line: str) -> str:
        """Apply one input line; returns its output line.

        Raises:
            ValueError: a malformed line (names it).
        """
        parts = line.split()
        if len(parts) < 2:
            raise ValueError(f"trace line needs 'TIME EVENT [FRAME]': {line!r}")
        now, event = float(parts[0]), parts[1]
        if now < self.now:
            raise ValueError(f"time goes backwards at {line!r}")
        self.now = now
        frame = bytes.fromhex(parts[2]) if len(parts) > 2 else b""
        if event in ("arrive", "depart", "gate") and not frame:
            raise ValueError(f"{event} needs a frame: {line!r}")
        if event == "arrive":
            reason, frames = self.ingress.arrive(now, priority_of(frame, self.config), len(frame))
            out = ["fwd" if reason is None else f"drop {reason}", *self._frames(frames)]
        elif event == "depart":
            out = ["-", *self._frames(self.ingress.depart(now, priority_of(frame, self.config), len(frame)))]
        elif event == "tick":
            out = ["-", *self._frames(self.ingress.tick(now))]
        elif event == "rx":
            pause = decode(frame)
            if pause is not None:
                self.egress.receive(now, pause)
            out = ["pfc" if pause is not None else "data"]
        elif event == "gate":
            p = priority_of(frame, self.config)
            verdict = self.egress.gate(now, p)
            out = [verdict] + ([f"{self.egress.resume_at(p):.17g}"] if verdict == HOLD else [])
        else:
            raise ValueError(f"unknown event {event!r}; allowed: arrive, depart, tick, rx, gate")
        due = self.ingress.next_deadline()
        out.append(f"next={due:.17g}" if due is not None else "next=-")
        return " ".join(out)

    def summary(self) -> list[str]:
        return [f"ingress {json.dumps(self.ingress.snapshot(), sort_keys=True)}",
                f"egress {json.dumps(self.egress.snapshot(self.now), sort_keys=True)}"]


def run(lines, pair: TracePair) -> list[str]:
    """Every output line of a trace (blank lines and ``#`` comments skipped), then the two summaries."""
    out = [pair.step(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return out + pair.summary()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.pfc.trace", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="PfcConfig.to_dict() as JSON")
    ap.add_argument("--rate", required=True, help="real line rate, e.g. 100G")
    ap.add_argument("--headroom", required=True, help="headroom bytes of this port, e.g. 4000 or 3.8MB")
    ap.add_argument("--scale", type=float, default=1.0, help="time dilation")
    ap.add_argument("--src", default="02:00:00:00:00:01", help="source MAC of the PFC frames sent")
    args = ap.parse_args(argv)
    pair = TracePair(PfcConfig.from_dict(json.loads(args.config)), parse_rate(args.rate, "--rate"),
                     parse_size(args.headroom, "--headroom"), Dilation(args.scale), args.src)
    for line in run(sys.stdin, pair):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
