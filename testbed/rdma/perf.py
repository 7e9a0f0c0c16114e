"""perftest-like tests over the soft-RDMA endpoint: ``write_bw``, ``send_bw``, ``write_lat``.

The server (:func:`serve`) answers one client per connection; the client (:func:`run_client`) drives the
test and reports like ``ib_write_bw``. Both sides use the same transport settings, which the client
sends in its hello, including the DCQCN constants already dilated by the replica's scale.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import socket
import statistics
import time

from testbed.console import console
from testbed.rdma.dcqcn import DcqcnParams, TimeSeries
from testbed.rdma.device import Device
from testbed.rdma.listen import default_bind
from testbed.rdma.oob import DEFAULT_PORT, Channel
from testbed.rdma.qp import QpConfig, Remote
from testbed.rdma.verbs import CompletionQueue, RdmaError, WcStatus
from testbed.roce.opcodes import ROCE_UDP_PORT

TESTS = ("write_bw", "send_bw", "write_lat")
_RX_DEPTH = 64


def config_to_dict(cfg: QpConfig) -> dict:
    doc = dataclasses.asdict(cfg)
    doc["dcqcn"] = dataclasses.asdict(cfg.dcqcn) if cfg.dcqcn else None
    return doc


def config_from_dict(doc: dict) -> QpConfig:
    doc = dict(doc)
    if doc.get("dcqcn"):
        doc["dcqcn"] = DcqcnParams(**doc["dcqcn"])
    if doc.get("seed") is not None:
        doc["seed"] = doc["seed"] + 1  # the server's loss draws differ from the client's
    return QpConfig(**doc)


def pattern(size: int, seed: int) -> bytearray:
    """Deterministic test data (so a digest on each side proves byte-exact placement)."""
    return bytearray(random.Random(seed).randbytes(size))


# -- server ---------------------------------------------------------------------------------------
def serve(bind: str | None = None, port: int = DEFAULT_PORT, roce_port: int = ROCE_UDP_PORT,
          once: bool = False, ready=None) -> list[dict]:
    """Accept clients and serve each test; returns the per-client results (``once``: after one).

    ``bind`` defaults to :func:`default_bind`."""
    results = []
    why = "--bind"
    if bind is None:
        bind, why = default_bind()
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as lsock:
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            lsock.bind((bind, port))
        except OSError as exc:
            raise RdmaError(f"cannot listen on {bind}:{port}: {exc.strerror}") from exc
        lsock.listen(4)
        if ready:
            ready(lsock.getsockname()[1])
        console.print(f"listening on {bind}:{lsock.getsockname()[1]} ({why}); RoCE UDP port {roce_port}")
        while True:
            conn, peer = lsock.accept()
            chan = Channel(conn)
            try:
                results.append(serve_one(chan, roce_port))
                console.print(f"served {peer[0]}: {results[-1]['test']}")
            except RdmaError as exc:
                console.print(f"[red]client {peer[0]}: {exc}[/red]")
                if once:
                    raise
            finally:
                chan.close()
            if once:
                return results


def serve_one(chan: Channel, roce_port: int = ROCE_UDP_PORT) -> dict:
    hello = chan.recv()
    test, size = hello.get("test"), hello.get("size")
    if test not in TESTS or not isinstance(size, int) or size < 0:
        raise RdmaError(f"bad hello from client: test={test!r} size={size!r}")
    cfg = config_from_dict(hello["config"])
    with Device(chan.local_ip, roce_port) as dev:
        pd, cq = dev.alloc_pd(), CompletionQueue()
        slots = _RX_DEPTH if test == "send_bw" else 1
        region = bytearray(max(1, size) * slots)
        mr = pd.reg_mr(region)
        qp = dev.create_qp(pd, cq, cfg)
        psn = random.getrandbits(24)
        peer = hello["qp"]
        dev.connect(qp, Remote(peer["qpn"], peer["psn"], peer["ip"], peer["port"]), psn)
        if test == "send_bw":
            for slot in range(slots):
                qp.post_recv(slot, mr, slot * max(1, size), max(1, size))
        chan.send({"qp": {"qpn": qp.qpn, "psn": psn, "ip": dev.ip, "port": dev.port},
                   "mr": {"addr": mr.addr, "rkey": mr.rkey, "length": mr.length}})
        received = 0
        while not chan.ready():
            dev.progress(timeout=0.005)
            for wc in cq.poll(64):
                if wc.status is WcStatus.SUCCESS and test == "send_bw":
                    received += 1
                    qp.post_recv(wc.wr_id, mr, wc.wr_id * max(1, size), max(1, size))
        done = chan.recv()
        reply = {"test": test, "stats": dataclasses.asdict(qp.stats), "device": dev.stats,
                 "received": received, "qp_state": qp.state.value}
        if done.get("verify"):
            reply["sha256"] = hashlib.sha256(region[:size]).hexdigest()
        chan.send(reply)
        return reply


# -- client ---------------------------------------------------------------------------------------
def run_client(host: str, test: str, size: int, iters: int | None = None, duration: float | None = None,
               port: int = DEFAULT_PORT, roce_port: int = ROCE_UDP_PORT, config: QpConfig | None = None,
               verify: bool = False, tx_depth: int = 16, seed: int = 1, series_every: float | None = None,
               timeout: float = 300.0, connect_wait: float = 0.0, source: str | None = None) -> dict:
    """Run one test against ``testbed rdma server`` at ``host``; returns the result document."""
    if test not in TESTS:
        raise RdmaError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    if (iters is None) == (duration is None):
        iters = iters or 1000
        duration = None
    cfg = config or QpConfig()
    chan = Channel.connect(host, port, wait=connect_wait, source=source)
    try:
        with Device(chan.local_ip, roce_port) as dev:
            return _client(chan, dev, test, size, iters, duration, cfg, verify, tx_depth, seed,
                           series_every, timeout)
    finally:
        chan.close()


def _client(chan, dev, test, size, iters, duration, cfg, verify, tx_depth, seed, series_every, timeout):
    pd, cq = dev.alloc_pd(), CompletionQueue()
    src = pattern(max(1, size), seed)
    mr = pd.reg_mr(src)
    qp = dev.create_qp(pd, cq, cfg)
    psn = random.getrandbits(24)
    chan.send({"test": test, "size": size, "config": config_to_dict(cfg),
               "qp": {"qpn": qp.qpn, "psn": psn, "ip": dev.ip, "port": dev.port}})
    reply = chan.recv()
    rq, rmr = reply["qp"], reply["mr"]
    dev.connect(qp, Remote(rq["qpn"], rq["psn"], rq["ip"], rq["port"]), psn)
    series = TimeSeries(qp.qpn) if series_every else None
    lat: list[float] = []
    posted = completed = 0
    # enough WRs to keep the window full, not so many that the last ones drain long after --duration
    depth = 1 if test == "write_lat" else max(2, min(tx_depth, -(-4 * cfg.window * cfg.mtu // max(1, size))))
    start = time.monotonic()
    started_at = time.time()
    stop_at = start + duration if duration else None
    give_up = start + timeout + (duration or 0)
    next_sample = start
    post_times: dict[int, float] = {}

    def more() -> bool:
        return posted < iters if stop_at is None else time.monotonic() < stop_at

    while True:
        while posted - completed < depth and more():
            if test == "send_bw":
                qp.post_send(posted, mr, 0, size)
            else:
                qp.post_write(posted, mr, 0, size, rmr["addr"], rmr["rkey"])
            post_times[posted] = time.monotonic()
            posted += 1
        if completed >= posted and not more():
            break
        dev.progress(timeout=0.002)
        now = time.monotonic()
        for wc in cq.poll(64):
            if wc.status is not WcStatus.SUCCESS:
                raise RdmaError(f"work request {wc.wr_id} failed: {wc.status.value}; QP: {qp.error}")
            completed += 1
            t0 = post_times.pop(wc.wr_id, None)
            if test == "write_lat" and t0 is not None:
                lat.append(now - t0)
        if series is not None and now >= next_sample:
            series.sample(now - start, qp.rp, qp.stats.cnps_tx, qp.stats.retransmissions, qp.stats.acked_bytes)
            next_sample = now + series_every
        if now > give_up:
            raise RdmaError(f"{test} did not finish within {timeout:g} s ({completed}/{posted} done; "
                            f"QP {qp.state.value})")
    seconds = time.monotonic() - start
    chan.send({"done": True, "verify": verify})
    server = chan.recv(timeout=30)
    nbytes = size * completed
    result = {"test": test, "bytes": size, "iterations": completed, "seconds": seconds, "started_at": started_at,
              "bw_avg_MBps": nbytes / seconds / 2 ** 20 if seconds else 0.0,
              "goodput_mbps": nbytes * 8 / seconds / 1e6 if seconds else 0.0,
              "msg_rate_mpps": completed / seconds / 1e6 if seconds else 0.0,
              "mtu": cfg.mtu, "retransmissions": qp.stats.retransmissions, "timeouts": qp.stats.timeouts,
              "naks": qp.stats.naks_rx, "cnps_rx": qp.stats.cnps_rx, "dropped_tx": qp.stats.dropped_tx,
              "local": {"qpn": qp.qpn, "psn": psn, "ip": dev.ip, "rkey": mr.rkey, "addr": mr.addr},
              "remote": {"qpn": rq["qpn"], "psn": rq["psn"], "ip": rq["ip"], "rkey": rmr["rkey"],
                         "addr": rmr["addr"]},
              "device": dict(dev.stats), "server": server}
    if verify:
        result["verified"] = server.get("sha256") == hashlib.sha256(src[:size]).hexdigest()
    if lat:
        half = sorted(x / 2 * 1e6 for x in lat)
        result.update({"t_min_usec": half[0], "t_max_usec": half[-1], "t_typical_usec": statistics.median(half),
                       "t_avg_usec": statistics.fmean(half),
                       "t_99_usec": half[min(len(half) - 1, int(len(half) * 0.99))]})
    if series is not None:
        result["series"] = series.to_json()
    return result


def report_text(r: dict) -> str:
    """The result laid out like perftest's ib_write_bw / ib_write_lat."""
    title = {"write_bw": "RDMA_Write BW Test", "send_bw": "Send BW Test", "write_lat": "RDMA_Write Latency Test"}
    bar = "-" * 87
    loc, rem = r["local"], r["remote"]
    lines = [bar, f"{title[r['test']]:^87}",
             f" Number of qps   : 1\t\tTransport type : soft RoCEv2 (UDP {ROCE_UDP_PORT})",
             f" Mtu             : {r['mtu']}[B]",
             f" local address:  IP {loc['ip']} QPN {loc['qpn']:#08x} PSN {loc['psn']:#08x} "
             f"RKey {loc['rkey']:#010x} VAddr {loc['addr']:#018x}",
             f" remote address: IP {rem['ip']} QPN {rem['qpn']:#08x} PSN {rem['psn']:#08x} "
             f"RKey {rem['rkey']:#010x} VAddr {rem['addr']:#018x}", bar]
    if r["test"] == "write_lat":
        lines.append(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
                     "    99% percentile[usec]")
        lines.append(f" {r['bytes']:<6} {r['iterations']:<10} {r['t_min_usec']:>13.2f} {r['t_max_usec']:>14.2f} "
                     f"{r['t_typical_usec']:>16.2f} {r['t_avg_usec']:>14.2f} {r['t_99_usec']:>23.2f}")
    else:
        lines.append(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
        lines.append(f" {r['bytes']:<10} {r['iterations']:<14} {'-':>15} {r['bw_avg_MBps']:>21.2f} "
                     f"{r['msg_rate_mpps']:>15.6f}")
    lines.append(bar)
    lines.append(f" retransmissions {r['retransmissions']}  timeouts {r['timeouts']}  NAKs {r['naks']}  "
                 f"CNPs {r['cnps_rx']}" + (f"  verified {r['verified']}" if "verified" in r else ""))
    return "\n".join(lines)
