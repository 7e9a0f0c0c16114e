"""Soft-RoCE flows across a running PFC replica, and what its link nodes counted (root glue).

The RoCE counterpart of :mod:`testbed.pfc.streams`: each flow is a soft-RDMA RC ``write_bw`` for a fixed
time (:mod:`testbed.rdma.endpoint`: the plan's emulated DCQCN, or none), from a sender in its host's
namespace to a server of its own in the destination's (several servers share a receiver for an N:1 incast:
each its own out-of-band port and RoCE UDP port, as N QPs on one NIC would be). The QPs' DSCP chooses the
priority: 26 (priority 3, lossless where the spec's ``pfc:`` says so) or another one (lossy). Every link
node is read before and after, so a trial reports per flow its goodput, resends, timeouts, CNPs and
DCQCN rate over time; per link direction its drops, PAUSE, time held and CE marks; and the frame ledger of
the data priority from the link nodes (:func:`testbed.pfc.counters.port_ledger`), with OVS's own losses
attributed. Used by the scenario ``roce_incast``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from testbed.errors import EmulationError
from testbed.pfc.counters import port_ledger
from testbed.pfc.streams import TrialCount
from testbed.rdma.oob import DEFAULT_PORT
from testbed.roce.opcodes import ROCE_UDP_PORT

ENDPOINT = [sys.executable, "-m", "testbed.rdma.endpoint"]
#: write_bw message size: 16 frames of 1 KB MTU: after the sending time a sender waits for at most its
#: window plus one message, even at a rate DCQCN cut deep.
MESSAGE = 16384
MTU = 1024


#: Time the senders get to start and connect before their common start: a process's imports take ~0.5 s
#: of a busy 2-core machine's CPU, and they all start at once (per flow, on top of a fixed part).
START_S, START_PER_FLOW_S = 2.0, 0.5
#: How long a sender waits for its outstanding messages after the sending time (emulated s): queues here
#: drain in well under a second, a tail loss on a lossy priority waits for the QP's ACK timeout (x scale:
#: minutes), and the trial reports those messages as unfinished instead.
DRAIN_S = 8.0


def tx_depth(window: int) -> int:
    """Messages posted ahead per QP: one window's worth (4 of 16 KB for 64 packets), and no more waiting
    behind it (what is posted but unsent at the end of the sending time must still drain at the QP's rate)."""
    return max(2, window * MTU // MESSAGE)


def send_doc(rep, src, dst, index: int, seconds: float, dscp: int, dcqcn: bool, window: int,
             series_every_s: float, start_at: float, rate_limit_bps: float | None = None) -> dict:
    """The endpoint's send document of flow ``index`` (its server's ports follow from the index);
    ``rate_limit_bps``: the QP's static limit (emulated bit/s), or none."""
    ep = rep.plan.endpoint(src)
    return {"host": rep.ip(dst), "test": "write_bw", "size": MESSAGE, "duration_s": seconds, "mtu": MTU,
            "window": window, "timeout_s": ep.emulated_qp_timeout_s,
            "dcqcn": ep.emulated_dcqcn if dcqcn else None, "series_every_s": series_every_s, "dscp": dscp,
            "port": DEFAULT_PORT + index, "connect_wait_s": 30, "start_at": start_at,
            "drain_s": DRAIN_S, "rate_limit_bps": rate_limit_bps, "tx_depth": tx_depth(window)}


def run_flows(rep, flows, seconds: float, workdir: Path, label: str, dscp: int, priority: int, dcqcn: bool,
              window: int, series_every_s: float, server_nic: dict | None = None) -> dict:
    """Run ``flows`` = [(src, dst) or (src, dst, rate limit in emulated bit/s), ...] together for ``seconds``
    (emulated = wall clock); returns per flow
    the sender's result document, the link directions' counters of ``priority`` over the trial (``hops``),
    the ledger, CPU and the nodes' stats (for :func:`testbed.pfc.streams.judge`). ``server_nic``: every
    server's receive side (a slow host, its buffer, the NIC's PAUSE: :class:`testbed.rdma.device.Device`);
    what it dropped and paused comes back in each flow's ``server.device``."""
    from testbed.rdma.endpoint import sender_result

    workdir.mkdir(parents=True, exist_ok=True)
    servers, senders, logs = [], {}, ExitStack()   # the processes' output files, closed once they ended
    try:
        flows = [(f[0], f[1], f[2] if len(f) > 2 else None) for f in flows]
        for i, (_src, dst, _limit) in enumerate(flows):
            log = logs.enter_context(open(workdir / f"{label}-server-{i}.log", "w"))
            nic = [json.dumps(server_nic)] if server_nic else []
            servers.append(rep.popen(dst, ENDPOINT + ["serve", "0.0.0.0", str(DEFAULT_PORT + i),
                                                      str(ROCE_UDP_PORT + i), *nic], stdout=log,
                                     stderr=subprocess.STDOUT))
        files = {}
        with TrialCount(rep, priority) as count:
            start_at = time.time() + START_S + START_PER_FLOW_S * len(flows)
            for i, (src, dst, limit) in enumerate(flows):
                key = f"{src}>{dst}"
                doc = send_doc(rep, src, dst, i, seconds, dscp, dcqcn, window, series_every_s, start_at, limit)
                files[key] = (workdir / f"{label}-{src}-{dst}.json", workdir / f"{label}-{src}-{dst}.log")
                senders[key] = rep.popen(src, ENDPOINT + ["send", json.dumps(doc)],
                                         stdout=logs.enter_context(files[key][0].open("w")),
                                         stderr=logs.enter_context(files[key][1].open("w")))
            deadline = time.monotonic() + START_S + START_PER_FLOW_S * len(flows) + seconds + DRAIN_S + 60
            for key, p in senders.items():
                try:
                    p.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired as exc:
                    raise EmulationError(f"RoCE sender {key} did not finish within {seconds + DRAIN_S + 60:g} s; "
                                         f"see {files[key][1]}") from exc
    finally:
        for p in [*senders.values(), *servers]:
            if p.poll() is None:
                p.terminate()
        for p in [*senders.values(), *servers]:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        logs.close()
    results = {key: sender_result(senders[key], *files[key]) for key in files}
    led = count.attributed(port_ledger(count.hops, [e.node for e in rep.plan.endpoints]))
    starts = [r["started_at"] for r in results.values()]
    return {"label": label, "dscp": dscp, "priority": priority, "dcqcn": dcqcn, "seconds": seconds,
            "start_spread_s": max(starts) - min(starts), "late_start_s": max(0.0, max(starts) - start_at),
            "window_pkts": window, "flows": results, "hops": count.hops, "ledger": led, "cpu": count.cpu,
            "stats": count.stats}
