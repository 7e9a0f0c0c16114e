"""Parameter server: completes the aggregations the switch has no slots for (ATP's best-effort fallback).

The switch forwards a contribution here (FLAG_SPILL set, destination rewritten to the PS) when the job's
index lies beyond its switch slots. The PS runs the same :class:`~testbed.agg.model.SlotPool` as the
switch model, so duplicates, completion and retransmissions after completion behave identically; it
answers a completed slot to every worker of the job (unicast each: hosts have no multicast tree) and a
retransmission after completion to its sender only.

    ps = ParamServer({1: 8})                     # job -> number of workers (pure core)
    for payload, addr in ps.on_packet(data, src): sock.sendto(payload, addr)

    python -m testbed.agg.ps --jobs 1:8,2:4 --stop-file /tmp/x   # the socket loop (runs on a host)
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import sys

from testbed.agg.model import MULTICAST, UNICAST, SlotPool
from testbed.agg.protocol import AGG_PORT, FLAG_RESULT, decode, encode
from testbed.errors import SpecError


class ParamServer:
    def __init__(self, jobs: dict[int, int]):
        self.jobs = dict(jobs)
        self.pools = {job: SlotPool() for job in self.jobs}
        self.addrs: dict[tuple[int, int], tuple] = {}
        self.received = 0
        self.completed = 0

    def on_packet(self, payload: bytes, src) -> list[tuple[bytes, tuple]]:
        """Replies (payload, address) for one received datagram; unknown jobs and results are ignored."""
        try:
            header, values = decode(payload)
        except SpecError:
            return []
        if header.job not in self.jobs or header.flags & FLAG_RESULT:
            return []
        self.received += 1
        self.addrs[(header.job, header.worker)] = src
        verdict = self.pools[header.job].contribute(header.slot, header, values, self.jobs[header.job])
        if verdict.action == MULTICAST:
            self.completed += 1
            out = encode(verdict.header, verdict.values)
            return [(out, addr) for (job, _), addr in sorted(self.addrs.items()) if job == header.job]
        if verdict.action == UNICAST:
            return [(encode(verdict.header, verdict.values), src)]
        return []


def parse_jobs(text: str) -> dict[int, int]:
    """``"1:8,2:4"`` -> {1: 8, 2: 4} (job id : workers)."""
    jobs = {}
    for item in filter(None, text.split(",")):
        try:
            job, n = item.split(":")
            jobs[int(job)] = int(n)
        except ValueError:
            raise SpecError("--jobs", f"expected JOB:WORKERS[,...], got {text!r}") from None
    if not jobs:
        raise SpecError("--jobs", "needs at least one JOB:WORKERS")
    return jobs


def serve(jobs: dict[int, int], stop_file: str, port: int = AGG_PORT) -> ParamServer:
    """Serve until ``stop_file`` exists (the runner creates it); returns the core for its counters."""
    ps = ParamServer(jobs)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("0.0.0.0", port))
    sock.setblocking(False)
    while not os.path.exists(stop_file):
        ready, _, _ = select.select([sock], [], [], 0.1)
        while ready:
            try:
                data, src = sock.recvfrom(4096)
            except BlockingIOError:
                break
            for payload, addr in ps.on_packet(data, src):
                sock.sendto(payload, addr)
    sock.close()
    return ps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.agg.ps", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", required=True, help="JOB:WORKERS[,JOB:WORKERS...]")
    parser.add_argument("--stop-file", required=True, help="serve until this file exists")
    args = parser.parse_args(argv)
    ps = serve(parse_jobs(args.jobs), args.stop_file)
    print(f"ps: received {ps.received} completed {ps.completed}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
