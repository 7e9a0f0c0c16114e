"""A stuck receiver: a NIC that keeps sending PAUSE (a PFC storm's source), for the watchdog scenarios.

    python -m testbed.pfc.storm --intf r0 --priority 3 --interval 0.5 --seconds 4 [--quanta 65535]

Sends one PFC frame (pause time ``--quanta`` for ``--priority``) every ``--interval`` seconds for
``--seconds`` out of ``--intf`` (AF_PACKET, root; run it inside the receiver's namespace), then one XON,
as a receiver whose buffer never drains would refresh its PAUSE. Prints ``{"pausing": true}`` once the
first PAUSE is out (the caller starts its traffic after that line, so the storm meets frames queued behind
it: a storm that begins after the senders finished holds an empty queue, and no watchdog should fire),
and ``{"sent": N}`` at the end.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path

from testbed.pfc.state import PauseFrame
from testbed.pfc.wire import encode
from testbed.poll import sleep_until


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.pfc.storm", description=__doc__.splitlines()[0])
    ap.add_argument("--intf", required=True)
    ap.add_argument("--priority", type=int, default=3)
    ap.add_argument("--quanta", type=int, default=0xFFFF)
    ap.add_argument("--interval", type=float, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    args = ap.parse_args(argv)
    mac = bytes.fromhex(Path(f"/sys/class/net/{args.intf}/address").read_text().strip().replace(":", ""))
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((args.intf, 0))
    pause = encode(PauseFrame.of({args.priority: args.quanta}), mac)
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < args.seconds:
        sock.send(pause)
        sent += 1
        if sent == 1:
            print(json.dumps({"pausing": True}), flush=True)
        sleep_until(start + sent * args.interval, time.monotonic)  # a schedule: the refresh period
    sock.send(encode(PauseFrame.of({args.priority: 0}), mac))
    print(json.dumps({"sent": sent, "xon": 1}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
