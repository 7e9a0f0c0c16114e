"""Host ring allreduce over TCP: the baseline in-network aggregation is compared with.

The classic bandwidth-optimal ring (Patarasuk & Yuan; NCCL's ring): the tensor is cut into ``n``
segments; in ``n - 1`` reduce-scatter steps each rank sends one segment to its successor and adds the
one it receives from its predecessor, then in ``n - 1`` all-gather steps the reduced segments travel
around once more. Each rank sends (and receives) ``2 (n - 1) / n`` times the tensor — against ~1x for
in-network aggregation, the ratio the scenario measures.

    step s of reduce-scatter:  send seg (rank - s) % n,      recv seg (rank - s - 1) % n, add
    step s of all-gather:      send seg (rank + 1 - s) % n,  recv seg (rank - s) % n,     copy

    python -m testbed.agg.ring --rank 0 --peers 10.0.0.1,10.0.0.2 ...     (one process per host)
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import sys
import threading
import time

import numpy as np

from testbed.agg.tensors import digest, make_tensor
from testbed.errors import SpecError
from testbed.poll import poll
from testbed.sockio import ShortRead, recv_exact

RING_PORT = 47000
ADD, COPY = "add", "copy"


def segments(size: int, n: int) -> list[tuple[int, int]]:
    """``n`` contiguous [start, end) ranges covering ``size`` elements (sizes differ by at most one)."""
    if n < 1:
        raise SpecError("workers", f"must be at least 1, got {n!r}")
    bounds = [size * i // n for i in range(n + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(n)]


def schedule(n: int, rank: int) -> list[tuple[int, int, str]]:
    """Steps ``(send segment, receive segment, add|copy)`` of ``rank`` (2 (n - 1) of them)."""
    steps = [((rank - s) % n, (rank - s - 1) % n, ADD) for s in range(n - 1)]
    steps += [((rank + 1 - s) % n, (rank - s) % n, COPY) for s in range(n - 1)]
    return steps


def allreduce(x: np.ndarray, rank: int, n: int, succ: socket.socket, pred: socket.socket) -> np.ndarray:
    """Ring allreduce of ``x`` over connected sockets; int32 sums wrap like the switch's."""
    out = x.copy()
    segs = segments(out.size, n)
    for send_seg, recv_seg, op in schedule(n, rank):
        s0, s1 = segs[send_seg]
        r0, r1 = segs[recv_seg]
        payload = out[s0:s1].tobytes()
        sender = threading.Thread(target=succ.sendall, args=(payload,))
        sender.start()
        try:
            incoming = np.frombuffer(recv_exact(pred, (r1 - r0) * out.itemsize), dtype=out.dtype)
        except ShortRead as exc:
            raise ConnectionError(f"ring predecessor closed the connection ({exc})") from None
        sender.join()
        if op == ADD:
            out[r0:r1] += incoming
        else:
            out[r0:r1] = incoming
    return out


def connect_ring(rank: int, peers: list[str], port: int, timeout: float = 30.0):
    """Listen for the predecessor, connect to the successor; returns (succ, pred, listener)."""
    n = len(peers)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(1)

    def try_connect():
        s = socket.create_connection((peers[(rank + 1) % n], port), timeout=1.0)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(None)
        return s

    succ = poll(try_connect, timeout=timeout, interval=0.05, what=f"ring successor {peers[(rank + 1) % n]}")
    ready, _, _ = select.select([listener], [], [], timeout)
    if not ready:
        raise TimeoutError(f"ring rank {rank}: predecessor did not connect within {timeout:g}s")
    pred, _ = listener.accept()
    return succ, pred, listener


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.agg.ring", description=__doc__.split("\n\n")[0])
    p.add_argument("--job", type=int, default=1)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--peers", required=True, help="comma-separated IPs in rank order")
    p.add_argument("--elements", type=int, required=True)
    p.add_argument("--dtype", default="int32", choices=("int32", "float32"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start-at", type=float, default=0.0)
    p.add_argument("--report", required=True)
    p.add_argument("--save")
    a = p.parse_args(argv)
    peers = a.peers.split(",")
    x = make_tensor(a.seed, a.job, a.rank, a.elements, a.dtype)
    succ, pred, listener = connect_ring(a.rank, peers, RING_PORT + a.job)
    while (left := a.start_at - time.time()) > 0:
        select.select([], [], [], min(left, 0.5))
    t0 = time.time()
    result = allreduce(x, a.rank, len(peers), succ, pred)
    t1 = time.time()
    for s in (succ, pred, listener):
        s.close()
    if a.save:
        np.save(a.save, result)
    sent = sum(e - s for s, e in (segments(x.size, len(peers))[st[0]] for st in schedule(len(peers), a.rank)))
    with open(a.report, "w") as f:
        json.dump({"worker": a.rank, "job": a.job, "start": t0, "end": t1, "time_s": t1 - t0,
                   "payload_bytes_sent": sent * x.itemsize, "digest": digest(result)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
