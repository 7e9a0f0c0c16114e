"""``testbed bench agg``: how fast BMv2 aggregates with p4/aggregation.p4 (packets/s in, Mbit/s summed).

    agb-t1 --veth-- port 1  simple_switch_fast (aggregation.p4)  port 2 --veth-- agb-t2
    AF_PACKET: W workers' contributions for chunk c        ->    one result per chunk (multicast to port 2)

One sender plays all workers: it keeps ``--window`` chunks in flight (every worker's packet for a chunk
sent back to back) and sends the next chunk when a result comes back, so the switch is kept busy without
overflowing its queues. The result rate times the workers is the switch's aggregation rate; the scenario
picks link rates below it. With ``--elems 64`` (or 32/128) a variant of the program is compiled
(-DAGG_ELEMS) to compare packet sizes: BMv2's per-packet cost favours large packets.
"""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path

import numpy as np

from testbed.console import out, print_json, require_root
from testbed.errors import SpecError

IFACES = ("agb-t1", "agb-s1", "agb-t2", "agb-s2")
AGG_IP = "10.255.0.1"


def register(sub) -> None:
    p = sub.add_parser("agg", help="BMv2 aggregation rate of p4/aggregation.p4", description=__doc__)
    p.add_argument("--workers", type=int, default=8, help="contributions per chunk (default 8)")
    p.add_argument("--chunks", type=int, default=2000, help="chunks to aggregate (default 2000)")
    p.add_argument("--window", type=int, default=8, help="chunks in flight (default 8)")
    p.add_argument("--elems", type=int, default=256, choices=(32, 64, 128, 256),
                   help="int32 elements per packet (default 256, the program's default)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=_main)


def _program(elems: int) -> Path:
    from testbed.p4rt.compile import compile_p4

    src = Path(__file__).resolve().parents[2] / "p4" / "aggregation.p4"
    return compile_p4(src, defines=None if elems == 256 else {"AGG_ELEMS": elems})


def _frame(job: int, worker: int, slot: int, shadow: int, seq: int, elems: int) -> bytes:
    import struct

    from testbed.agg.protocol import AGG_PORT, EXP_BIAS, job_port

    payload = struct.pack("!BBBBHHI", job, worker, 0, EXP_BIAS, (shadow << 15) | slot, elems, seq)
    payload += np.full(elems, worker + 1, dtype=">i4").tobytes()
    udp = struct.pack("!HHHH", job_port(job), AGG_PORT, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     socket.inet_aton(f"10.0.0.{worker + 1}"), socket.inet_aton(AGG_IP))
    return bytes.fromhex("02ff00000001" "020a00000001" "0800") + ip + udp


def measure(workers: int, chunks: int, window: int, elems: int) -> dict:
    from testbed.emu import RunRegistry
    from testbed.p4rt.entries import TableEntry
    from testbed.p4rt.switch import Bmv2Config, Bmv2Process
    from testbed.plan.alloc import Allocator

    json_path = _program(elems)
    with RunRegistry("bench-agg") as run:
        run.add_veth(IFACES[0], IFACES[1])
        run.add_veth(IFACES[2], IFACES[3])
        cfg = Bmv2Config(name="agb", json_path=json_path, ports={1: IFACES[1], 2: IFACES[3]},
                         log_dir=Path(tempfile.mkdtemp(prefix="bench-agg-")), **Allocator().switch("agb"))
        proc = Bmv2Process(cfg).start(run)
        proc.wait_ready()
        with proc.client() as c:
            c.apply([TableEntry("AggIngress.agg_address", "aggregate_here", (AGG_IP,)),
                     TableEntry("AggIngress.slots.job_table", "set_job", ("1",),
                                ("0", str(window), str(window), str((1 << workers) - 1), str(workers), "1", "0.0.0.0"))])
            c.mc_group(1, [2])
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        tx.bind((IFACES[0], 0))
        rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        rx.bind((IFACES[2], 0))
        rx.settimeout(5.0)
        frames = [[_frame(1, w, c % window, (c // window) % 2, c, elems) for w in range(workers)]
                  for c in range(chunks)]
        sent = got = 0
        t0 = time.monotonic()
        while sent < min(window, chunks):
            for f in frames[sent]:
                tx.send(f)
            sent += 1
        while got < chunks:
            try:
                data, addr = rx.recvfrom(4096)
            except socket.timeout:
                break
            if addr[2] == socket.PACKET_OUTGOING or len(data) < 42 or data[23] != 17:
                continue
            got += 1
            if sent < chunks:
                for f in frames[sent]:
                    tx.send(f)
                sent += 1
        dt = time.monotonic() - t0
        tx.close()
        rx.close()
    return {"elems": elems, "workers": workers, "window": window, "chunks": chunks, "results": got,
            "seconds": round(dt, 3), "packets_in_per_s": round(got * workers / dt),
            "aggregated_input_mbps": round(got * workers * elems * 4 * 8 / dt / 1e6, 2),
            "complete": got == chunks}


def _main(args) -> int:
    for name, v, lo in (("--workers", args.workers, 2), ("--chunks", args.chunks, 1), ("--window", args.window, 1)):
        if v < lo:
            raise SpecError(name, f"must be at least {lo}, got {v}")
    if args.workers > 32:
        raise SpecError("--workers", f"at most 32, got {args.workers}")
    require_root("testbed bench agg")
    doc = measure(args.workers, args.chunks, args.window, args.elems)
    if args.json:
        print_json(doc)
    else:
        out.print(f"aggregation.p4 ({doc['elems']} x int32/packet, {doc['workers']} workers): "
                  f"{doc['packets_in_per_s']} packets/s in, {doc['aggregated_input_mbps']} Mbit/s summed "
                  f"({doc['results']}/{doc['chunks']} results in {doc['seconds']} s)")
    return 0 if doc["complete"] else 1
