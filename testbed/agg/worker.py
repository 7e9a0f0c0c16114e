"""A worker process: streams its tensor through the switch over a UDP socket (thin glue over WorkerStream).

Runs on a replica host (``rep.popen(host, [python, -m, testbed.agg.worker, ...])``); all workers start
at the same wall-clock instant ``--start-at`` (hosts share the machine's clock), and each writes a JSON
report (times, packets, retransmissions) and its result (``.npy``) for the runner to check.

Loss: ``--loss P`` drops each outgoing datagram with probability P from a seeded RNG *before* it
reaches the socket — a stand-in for link loss, labelled as such in the results ("injected at sender").
"""

from __future__ import annotations

import argparse
import json
import random
import select
import socket
import sys
import time

import numpy as np

from testbed.agg.protocol import AGG_PORT, job_port
from testbed.agg.stream import WorkerStream
from testbed.agg.tensors import digest, make_tensor


class LossySender:
    """sendto with seeded Bernoulli loss (sender-side stand-in for a lossy link)."""

    def __init__(self, sock: socket.socket, dst, loss: float, seed: int):
        self.sock, self.dst, self.loss = sock, dst, loss
        self.rng = random.Random(seed)
        self.dropped = 0
        self.sent = 0

    def send(self, payloads) -> None:
        for p in payloads:
            if self.loss and self.rng.random() < self.loss:
                self.dropped += 1
                continue
            self.sock.sendto(p, self.dst)
            self.sent += 1


def run(stream: WorkerStream, agg_ip: str, loss: float, loss_seed: int, start_at: float,
        deadline_s: float) -> dict:
    """Drive ``stream`` to completion; returns the report (raises TimeoutError past ``deadline_s``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    sock.bind(("0.0.0.0", job_port(stream.job)))
    tx = LossySender(sock, (agg_ip, AGG_PORT), loss, loss_seed)
    # synchronised start: wait on the clock with select (the socket is already bound, nothing is lost)
    while (left := start_at - time.time()) > 0:
        select.select([], [], [], min(left, 0.5))
    t0 = time.time()
    tx.send(stream.start(time.monotonic()))
    limit = time.monotonic() + deadline_s
    while not stream.done:
        now = time.monotonic()
        if now > limit:
            raise TimeoutError(f"worker {stream.worker}: not done after {deadline_s:g}s "
                               f"({stream.retransmits} retransmissions)")
        deadline = stream.next_deadline()
        wait = 0.05 if deadline is None else max(0.0, min(deadline - now, 0.05))
        ready, _, _ = select.select([sock], [], [], wait)
        if ready:
            while True:
                try:
                    data = sock.recv(4096, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                tx.send(stream.on_packet(data, time.monotonic()))
        tx.send(stream.on_timer(time.monotonic()))
    t1 = time.time()
    sock.close()
    return {"worker": stream.worker, "job": stream.job, "start": t0, "end": t1, "time_s": t1 - t0,
            "positions": stream.positions, "sent": stream.sent, "retransmits": stream.retransmits,
            "dropped_injected": tx.dropped, "timeout_final_s": stream.timeout,
            "rtt_median_s": float(np.median(stream.rtt_samples)) if stream.rtt_samples else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.agg.worker", description=__doc__.split("\n\n")[0])
    p.add_argument("--job", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--agg-ip", required=True)
    p.add_argument("--elements", type=int, required=True)
    p.add_argument("--dtype", default="int32", choices=("int32", "float32"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--timeout", type=float, default=0.2, help="retransmission timeout, seconds")
    p.add_argument("--loss", type=float, default=0.0)
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock start (time.time())")
    p.add_argument("--deadline", type=float, default=300.0)
    p.add_argument("--report", required=True, help="JSON report path")
    p.add_argument("--save", help="write the result here (.npy)")
    a = p.parse_args(argv)
    tensor = make_tensor(a.seed, a.job, a.rank, a.elements, a.dtype)
    stream = WorkerStream(job=a.job, worker=a.rank, n_workers=a.workers, tensor=tensor, window=a.window,
                          timeout=a.timeout)
    report = run(stream, a.agg_ip, a.loss, loss_seed=a.seed * 1000 + a.job * 100 + a.rank,
                 start_at=a.start_at, deadline_s=a.deadline)
    result = stream.result()
    report["digest"] = digest(result)
    if a.save:
        np.save(a.save, result)
    with open(a.report, "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
