"""perftest-like tests over the soft-RDMA endpoint: ``write_bw``, ``send_bw``, ``write_lat``, ``read_bw``,
``read_lat``, ``atomic_bw``, over RC (all), UC (write/send) or UD (send), on ``qps`` queue pairs (as
perftest's ``-q``: work spread round-robin, each QP its own UDP source port so ECMP may spread them).

The server (:func:`serve`) answers one client per connection; the client (:func:`run_client`) drives the
test and reports like ``ib_write_bw``. Both sides use the same transport settings, which the client
sends in its hello, including the DCQCN constants already dilated by the replica's scale. Data is
checked byte for byte with ``verify``: a digest of the target region for WRITE/SEND, the READ data
against the server's known pattern, and for atomics the final counter and every fetched value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import statistics
import struct
import time

from testbed.console import console
from testbed.rdma.dcqcn import DcqcnParams, TimeSeries
from testbed.rdma.device import Device
from testbed.rdma.listen import open_listener
from testbed.rdma.oob import DEFAULT_PORT, Channel
from testbed.rdma.qp import GRH_LEN, QpConfig, Remote, UdDest
from testbed.rdma.verbs import (
    LOCAL_WRITE,
    REMOTE_ATOMIC,
    REMOTE_READ,
    REMOTE_WRITE,
    CompletionQueue,
    RdmaError,
    WcStatus,
)
from testbed.roce.opcodes import ROCE_UDP_PORT

TESTS = ("write_bw", "send_bw", "write_lat", "read_bw", "read_lat", "atomic_bw")
#: which transports each test runs over (perftest: -c RC|UC|UD)
TRANSPORTS = {"write_bw": ("rc", "uc"), "send_bw": ("rc", "uc", "ud"), "write_lat": ("rc", "uc"),
              "read_bw": ("rc",), "read_lat": ("rc",), "atomic_bw": ("rc",)}
MAX_QPS = 64
QKEY = 0x11111111
_RX_DEPTH = 64
_ACCESS = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC


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


def check_test(test: str, transport: str, qps: int, size: int, mtu: int) -> None:
    """Raises :class:`RdmaError` for a combination perftest would refuse."""
    if test not in TESTS:
        raise RdmaError(f"unknown test {test!r}; choose one of {', '.join(TESTS)}")
    if transport not in TRANSPORTS[test]:
        raise RdmaError(f"{test} runs over {'/'.join(t.upper() for t in TRANSPORTS[test])}, "
                        f"not {transport.upper()}")
    if not 1 <= qps <= MAX_QPS:
        raise RdmaError(f"qps must be 1..{MAX_QPS}, got {qps}")
    if transport == "ud" and size > mtu:
        raise RdmaError(f"UD messages are one packet: size {size} exceeds the MTU {mtu}")


# -- server ---------------------------------------------------------------------------------------
def serve(bind: str | None = None, port: int = DEFAULT_PORT, roce_port: int = ROCE_UDP_PORT,
          once: bool = False, ready=None, nic: dict | None = None) -> list[dict]:
    """Accept clients and serve each test; returns the per-client results (``once``: after one).

    ``bind`` defaults to :func:`testbed.rdma.listen.default_bind`; ``nic``: the soft NIC's receive side
    (:class:`testbed.rdma.device.Device`'s ``rx_limit_pps``, ``rx_buffer_bytes``, ``nic_pfc``)."""
    results = []
    lsock, bind, why = open_listener(bind, port, 4)
    with lsock:
        if ready:
            ready(lsock.getsockname()[1])
        console.print(f"listening on {bind}:{lsock.getsockname()[1]} ({why}); RoCE UDP port {roce_port}")
        while True:
            conn, peer = lsock.accept()
            chan = Channel(conn)
            try:
                results.append(serve_one(chan, roce_port, nic))
                console.print(f"served {peer[0]}: {results[-1]['test']}")
            except RdmaError as exc:
                console.print(f"[red]client {peer[0]}: {exc}[/red]")
                if once:
                    raise
            finally:
                chan.close()
            if once:
                return results


def _peer_qps(hello: dict) -> list[dict]:
    qps = hello.get("qps") or ([hello["qp"]] if "qp" in hello else [])
    if not isinstance(qps, list) or not qps or not all(isinstance(q, dict) for q in qps):
        raise RdmaError("bad hello from client: no QP records")
    return qps


def serve_one(chan: Channel, roce_port: int = ROCE_UDP_PORT, nic: dict | None = None) -> dict:
    hello = chan.recv()
    test, size = hello.get("test"), hello.get("size")
    transport = hello.get("transport", "rc")
    if not isinstance(size, int) or size < 0:
        raise RdmaError(f"bad hello from client: size={size!r}")
    peers = _peer_qps(hello)
    cfg = config_from_dict(hello["config"])
    check_test(test, transport, len(peers), size, cfg.mtu)
    seed = int(hello.get("seed", 1)) + 1000
    with Device(chan.local_ip, roce_port, **(nic or {})) as dev:
        pd, cq = dev.alloc_pd(), CompletionQueue()
        slot = max(1, size) + (GRH_LEN if transport == "ud" else 0)
        if test == "send_bw":
            region = bytearray(slot * _RX_DEPTH * len(peers))
        elif test in ("read_bw", "read_lat"):
            region = pattern(max(1, size), seed)
        elif test == "atomic_bw":
            region = bytearray(8 * len(peers))
        else:
            region = bytearray(max(1, size))
        mr = pd.reg_mr(region, _ACCESS)
        qps, records = [], []
        for i, peer in enumerate(peers):
            psn = random.getrandbits(24)
            qp = dev.create_qp(pd, cq, cfg, transport=transport, qkey=QKEY, psn=psn,
                               qpn=hello.get("server_qpn") if i == 0 else None)
            if transport != "ud":
                dev.connect(qp, Remote(peer["qpn"], peer["psn"], peer["ip"], peer["port"]), psn)
            if test == "send_bw":
                for k in range(_RX_DEPTH):
                    wr = i * _RX_DEPTH + k
                    qp.post_recv(wr, mr, wr * slot, slot)
            qps.append(qp)
            records.append({"qpn": qp.qpn, "psn": psn, "ip": dev.ip, "port": dev.port, "qkey": QKEY,
                            "sport": qp.sport})
        chan.send({"qp": records[0], "qps": records, "seed": seed,
                   "mr": {"addr": mr.addr, "rkey": mr.rkey, "length": mr.length}})
        by_qpn = {qp.qpn: qp for qp in qps}
        received = 0
        while not chan.ready():
            dev.progress(timeout=0.005)
            for wc in cq.poll(64):
                if wc.status is WcStatus.SUCCESS and test == "send_bw":
                    received += 1
                    by_qpn[wc.qp_num].post_recv(wc.wr_id, mr, wc.wr_id * slot, slot)
        done = chan.recv()
        if transport != "rc":  # nothing acknowledges UC/UD: take in what is still on its way
            received += _drain(dev, cq, test, by_qpn, mr, slot, done.get("sent", 0) - received)
        stats = [dataclasses.asdict(qp.stats) for qp in qps]
        reply = {"test": test, "transport": transport, "stats": _sum_stats(stats), "qp_stats": stats,
                 "device": dev.receive_stats(), "received": received, "qp_state": qps[0].state.value,
                 "qp_states": [qp.state.value for qp in qps]}
        if done.get("verify"):
            if test == "atomic_bw":
                reply["counters"] = [struct.unpack_from("<Q", region, 8 * i)[0] for i in range(len(qps))]
            elif test == "send_bw":
                off = GRH_LEN if transport == "ud" else 0
                reply["sha256"] = hashlib.sha256(region[off:off + size]).hexdigest()
            else:
                reply["sha256"] = hashlib.sha256(region[:size]).hexdigest()
        chan.send(reply)
        return reply


def _drain(dev, cq, test, by_qpn, mr, slot, owed: int, quiet: float = 0.2, limit: float = 5.0) -> int:
    """Receive until ``owed`` SENDs arrived (send_bw) or the port has been quiet for ``quiet`` seconds."""
    got = 0
    deadline = time.monotonic() + limit
    last_rx, rx = time.monotonic(), dev.stats["rx"]
    while time.monotonic() < deadline:
        dev.progress(timeout=0.01)
        for wc in cq.poll(64):
            if wc.status is WcStatus.SUCCESS and test == "send_bw":
                got += 1
                by_qpn[wc.qp_num].post_recv(wc.wr_id, mr, wc.wr_id * slot, slot)
        if dev.stats["rx"] != rx:
            last_rx, rx = time.monotonic(), dev.stats["rx"]
        if (test == "send_bw" and got >= owed) or time.monotonic() - last_rx > quiet:
            break
    return got


def _sum_stats(stats: list[dict]) -> dict:
    return {k: sum(s[k] for s in stats) for k in stats[0]}


# -- client ---------------------------------------------------------------------------------------
def run_client(host: str, test: str, size: int, iters: int | None = None, duration: float | None = None,
               port: int = DEFAULT_PORT, roce_port: int = ROCE_UDP_PORT, config: QpConfig | None = None,
               verify: bool = False, tx_depth: int = 16, seed: int = 1, series_every: float | None = None,
               timeout: float = 300.0, connect_wait: float = 0.0, source: str | None = None,
               qps: int = 1, transport: str = "rc", qpns: tuple[int, int] | None = None,
               atomic: str = "faa", sizes: tuple[int, ...] | None = None, start_at: float | None = None,
               drain: float | None = None) -> dict:
    """Run one test against ``testbed rdma server`` at ``host``; returns the result document.

    ``sizes`` (write_lat only): a flow-size mix, message ``n`` is ``sizes[n % len(sizes)]`` bytes (``size``
    must be their largest: the regions are sized by it); the result then lists every message's size and
    latency (``message_lat_usec``: [[bytes, usec], ...], half round trips as perftest's), so a scenario can
    report completion times per size class. perftest itself has one size per run.

    ``atomic`` (atomic_bw): ``faa`` adds 1 to the QP's counter; ``cas`` compares it with the count of the
    QP's earlier atomics and swaps in one more (all succeed when the responder executes them in order).

    ``qpns``: (this side's, the server's) number of the first QP, when a control plane must know them in advance
    (switches' QP maps preloaded for fast CNP); default random.

    ``start_at``: wall-clock time (``time.time()``) to start posting at, once connected: senders started as
    separate processes on a busy machine are ready seconds apart, and an incast needs them to begin together
    (a sender ready after it starts at once; ``started_at`` in the result says when it did).

    ``drain`` (with ``duration``): stop waiting for the work requests still outstanding this long after the
    sending time; the result counts them (``unfinished``). A tail loss on a lossy path waits for the QP's ACK
    timeout, which a dilated replica multiplies by its scale: minutes, where the experiment wants the rates."""
    cfg = config or QpConfig()
    check_test(test, transport, qps, size, cfg.mtu)
    sizes = check_sizes(test, size, sizes)
    if atomic not in ("faa", "cas"):
        raise RdmaError(f"atomic must be 'faa' or 'cas', got {atomic!r}")
    if (iters is None) == (duration is None):
        iters = iters or 1000
        duration = None
    chan = Channel.connect(host, port, wait=connect_wait, source=source)
    try:
        with Device(chan.local_ip, roce_port) as dev:
            return _client(chan, dev, test, size, iters, duration, cfg, verify, tx_depth, seed,
                           series_every, timeout, qps, transport, qpns, atomic, sizes, start_at, drain)
    finally:
        chan.close()


class _Work:
    """What the client posts: one kind of WR per test, round-robin over the QPs, at most ``depth``
    outstanding on each (perftest's tx-depth is per QP); READ/atomic WRs each own a local slot."""

    def __init__(self, test, size, qps, mr, rmr, dests, depth, sink=None, atomic="faa", sizes=None):
        self.test, self.size, self.qps, self.mr, self.rmr, self.dests = test, size, qps, mr, rmr, dests
        self.sizes = sizes
        self.depth = depth
        self.slot = max(8, size)
        self.sink = sink
        self.free = [list(range(depth)) for _ in qps]
        self.where: dict[int, tuple[int, int]] = {}   # WR -> (QP index, slot)
        self.done_slots: set[int] = set()             # byte offsets of READ buffers that completed
        self.fetched: dict[int, list[int]] = {i: [] for i in range(len(qps))}
        self.atomic = atomic
        self.atomics_posted = [0] * len(qps)
        self._rr = 0

    def post(self, n: int) -> bool:
        """Post WR ``n`` on the next QP with room; False when every QP is full."""
        for k in range(len(self.qps)):
            i = (self._rr + k) % len(self.qps)
            if self.free[i]:
                break
        else:
            return False
        self._rr = i + 1
        slot = self.free[i].pop()
        self.where[n] = (i, slot)
        qp = self.qps[i]
        if self.test in ("write_bw", "write_lat"):
            qp.post_write(n, self.mr, 0, self.size_of(n), self.rmr["addr"], self.rmr["rkey"])
        elif self.test == "send_bw":
            qp.post_send(n, self.mr, 0, self.size, dest=self.dests[i] if self.dests else None)
        elif self.test in ("read_bw", "read_lat"):
            qp.post_read(n, self.sink, self._offset(i, slot), self.size, self.rmr["addr"], self.rmr["rkey"])
        else:   # CAS: the counter holds the QP's earlier atomics (in order on one QP); FAA adds 1
            k = self.atomics_posted[i]
            self.atomics_posted[i] += 1
            qp.post_atomic(n, self.sink, self._offset(i, slot), self.rmr["addr"] + 8 * i, self.rmr["rkey"],
                           self.atomic, k + 1 if self.atomic == "cas" else 1, compare=k)
        return True

    def size_of(self, n: int) -> int:
        """Bytes of WR ``n``: its place in the size mix, else the one size."""
        return self.sizes[n % len(self.sizes)] if self.sizes else self.size

    def _offset(self, i: int, slot: int) -> int:
        return (i * self.depth + slot) * self.slot

    def completed(self, n: int) -> None:
        i, slot = self.where.pop(n)
        off = self._offset(i, slot)
        if self.test == "atomic_bw":
            self.fetched[i].append(struct.unpack_from("<Q", self.sink.view, off)[0])
        elif self.test in ("read_bw", "read_lat"):
            self.done_slots.add(off)
        self.free[i].append(slot)


def check_sizes(test: str, size: int, sizes) -> tuple[int, ...] | None:
    """``sizes`` as a tuple (None: one size), or :class:`RdmaError` naming what is wrong with the mix."""
    if sizes is None:
        return None
    sizes = tuple(sizes)
    if test != "write_lat":
        raise RdmaError(f"a size mix (sizes) is offered for write_lat only, not {test}")
    if not sizes or any(not isinstance(x, int) or x < 1 for x in sizes):
        raise RdmaError(f"sizes must be whole numbers of bytes >= 1, got {list(sizes)!r}")
    if max(sizes) != size:
        raise RdmaError(f"size must be the mix's largest ({max(sizes)}), got {size}")
    return sizes


def _client(chan, dev, test, size, iters, duration, cfg, verify, tx_depth, seed, series_every, timeout,
            nqps, transport, qpns=None, atomic="faa", sizes=None, start_at=None, drain=None):
    pd, cq = dev.alloc_pd(), CompletionQueue()
    src = pattern(max(1, size), seed)
    mr = pd.reg_mr(src)
    qps, records = [], []
    for i in range(nqps):
        psn = random.getrandbits(24)
        qp = dev.create_qp(pd, cq, cfg, transport=transport, qkey=QKEY, psn=psn,
                           qpn=qpns[0] if qpns and i == 0 else None)
        qps.append(qp)
        records.append({"qpn": qp.qpn, "psn": psn, "ip": dev.ip, "port": dev.port, "qkey": QKEY, "sport": qp.sport})
    chan.send({"test": test, "size": size, "config": config_to_dict(cfg), "transport": transport, "seed": seed,
               "qp": records[0], "qps": records, "server_qpn": qpns[1] if qpns else None})
    reply = chan.recv()
    rqs, rmr = reply["qps"], reply["mr"]
    if len(rqs) != nqps:
        raise RdmaError(f"server answered {len(rqs)} QPs for {nqps}")
    dests = None
    if transport == "ud":
        dests = [UdDest(r["ip"], r["port"], r["qpn"], r["qkey"]) for r in rqs]
    else:
        for qp, rec, rq in zip(qps, records, rqs, strict=True):
            dev.connect(qp, Remote(rq["qpn"], rq["psn"], rq["ip"], rq["port"]), rec["psn"])
    lat_test = test in ("write_lat", "read_lat")
    # per QP: enough WRs to keep the window full, not so many that the last ones drain long after --duration
    per_qp = 1 if lat_test else max(2, min(tx_depth, -(-4 * cfg.window * cfg.mtu // max(1, size))))
    if test == "atomic_bw":
        per_qp = min(tx_depth, cfg.max_rd_atomic)
    sink = pd.reg_mr(bytearray(max(8, size) * per_qp * nqps)) if test in ("read_bw", "read_lat", "atomic_bw") \
        else None
    work = _Work(test, size, qps, mr, rmr, dests, per_qp, sink, atomic, sizes)
    qp0 = qps[0]
    series = TimeSeries(qp0.qpn) if series_every else None
    lat: list[float] = []
    message_lat: list[list] = []   # with a size mix: [bytes, usec] per message
    posted = completed = nbytes = 0
    while start_at is not None and time.time() < start_at:   # connected: wait for the common start
        dev.progress(timeout=min(0.01, start_at - time.time()))
    start = time.monotonic()
    started_at = time.time()
    stop_at = start + duration if duration else None
    give_up = start + timeout + (duration or 0)
    next_sample = start
    post_times: dict[int, float] = {}

    def more() -> bool:
        return posted < iters if stop_at is None else time.monotonic() < stop_at

    while True:
        while more() and work.post(posted):
            post_times[posted] = time.monotonic()
            posted += 1
        if completed >= posted and not more():
            break
        dev.progress(timeout=0.002)
        now = time.monotonic()
        for wc in cq.poll(64):
            if wc.status is not WcStatus.SUCCESS:
                bad = next((q for q in qps if q.qpn == wc.qp_num), qp0)
                raise RdmaError(f"work request {wc.wr_id} failed: {wc.status.value}; QP: {bad.error}")
            completed += 1
            nbytes += work.size_of(wc.wr_id)
            t0 = post_times.pop(wc.wr_id, None)
            if lat_test and t0 is not None:
                lat.append(now - t0)
                if sizes:
                    message_lat.append([work.size_of(wc.wr_id), (now - t0) * 0.5e6])
            work.completed(wc.wr_id)
        if series is not None and now >= next_sample:
            series.sample(now - start, qp0.rp, qp0.stats.cnps_tx, qp0.stats.retransmissions, qp0.stats.acked_bytes)
            next_sample = now + series_every
        if stop_at is not None and drain is not None and now > stop_at + drain:
            break   # outstanding WRs reported as unfinished
        if now > give_up:
            raise RdmaError(f"{test} did not finish within {timeout:g} s ({completed}/{posted} done; "
                            f"QP {qp0.state.value})")
    seconds = time.monotonic() - start
    chan.send({"done": True, "verify": verify, "sent": completed})
    server = chan.recv(timeout=30)
    if test == "atomic_bw":
        nbytes = 8 * completed
    stat = lambda k: sum(getattr(q.stats, k) for q in qps)  # noqa: E731 - a local sum over the QPs
    rq0 = rqs[0]
    result = {"test": test, "transport": transport, "qps": nqps, "bytes": size, "iterations": completed,
              "unfinished": posted - completed,
              "seconds": seconds, "started_at": started_at,
              "bw_avg_MBps": nbytes / seconds / 2 ** 20 if seconds else 0.0,
              "goodput_mbps": nbytes * 8 / seconds / 1e6 if seconds else 0.0,
              "msg_rate_mpps": completed / seconds / 1e6 if seconds else 0.0,
              "mtu": cfg.mtu, "retransmissions": stat("retransmissions"), "timeouts": stat("timeouts"),
              "naks": stat("naks_rx"), "cnps_rx": stat("cnps_rx"), "dropped_tx": stat("dropped_tx"),
              "read_retries": stat("read_retries"),
              "tx_packets": stat("tx_packets"), "rx_packets": stat("rx_packets"), "tx_bytes": stat("tx_bytes"),
              "pacing_lost_bytes": stat("pacing_lost_bytes"),
              "pacing_late_max_s": max(q.stats.pacing_late_max_s for q in qps),
              "local": {"qpn": qp0.qpn, "psn": records[0]["psn"], "ip": dev.ip, "rkey": mr.rkey, "addr": mr.addr,
                        "sport": qp0.sport},
              "remote": {"qpn": rq0["qpn"], "psn": rq0["psn"], "ip": rq0["ip"], "rkey": rmr["rkey"],
                         "addr": rmr["addr"]},
              "qp_list": [{"qpn": q.qpn, "sport": q.sport, "remote_qpn": r["qpn"], "acked_bytes": q.stats.acked_bytes}
                          for q, r in zip(qps, rqs, strict=True)],
              "device": dict(dev.stats), "server": server}
    if test == "atomic_bw":
        result["atomic"] = atomic
    if sizes:   # "bytes" stays the largest message (its region); the mix's bytes are counted per message
        result.update({"sizes": list(sizes), "message_lat_usec": message_lat, "bytes_total": nbytes})
    if verify:
        result["verified"] = _verified(test, size, src, work, server, reply.get("seed", 0))
    if lat:
        scale = 1e6 if test == "read_lat" else 0.5e6  # ib_read_lat reports the round trip, write_lat half
        ts = sorted(x * scale for x in lat)
        result.update({"t_min_usec": ts[0], "t_max_usec": ts[-1], "t_typical_usec": statistics.median(ts),
                       "t_avg_usec": statistics.fmean(ts), "t_99_usec": ts[min(len(ts) - 1, int(len(ts) * 0.99))]})
    if series is not None:
        result["series"] = series.to_json()
    return result


def _verified(test, size, src, work, server, server_seed) -> bool:
    if test in ("read_bw", "read_lat"):
        want = pattern(max(1, size), server_seed)[:size]
        return bool(work.done_slots) and all(work.sink.view[off:off + size] == want for off in work.done_slots)
    if test == "atomic_bw":
        fetched = work.fetched
        counters = server.get("counters", [])
        return all(sorted(fetched[i]) == list(range(len(fetched[i]))) and counters[i] == len(fetched[i])
                   for i in fetched) and len(counters) == len(fetched)
    return server.get("sha256") == hashlib.sha256(src[:size]).hexdigest()


def pacing_lost_share(r: dict) -> float:
    """The share of its DCQCN allowance a sender's result lost to late wake-ups (lost / (sent + lost))."""
    lost = int(r.get("pacing_lost_bytes", 0))
    return lost / (lost + int(r.get("tx_bytes", 0))) if lost else 0.0


def report_text(r: dict) -> str:
    """The result laid out like perftest's ib_write_bw / ib_write_lat / ib_read_bw / ib_atomic_bw."""
    title = {"write_bw": "RDMA_Write BW Test", "send_bw": "Send BW Test", "write_lat": "RDMA_Write Latency Test",
             "read_bw": "RDMA_Read BW Test", "read_lat": "RDMA_Read Latency Test",
             "atomic_bw": f"Atomic {'CMP_AND_SWAP' if r.get('atomic') == 'cas' else 'FETCH_AND_ADD'} BW Test"}
    bar = "-" * 87
    loc, rem = r["local"], r["remote"]
    lines = [bar, f"{title[r['test']]:^87}",
             f" Number of qps   : {r.get('qps', 1)}\t\tTransport type : soft RoCEv2 (UDP {ROCE_UDP_PORT})",
             f" Connection type : {r.get('transport', 'rc').upper()}",
             f" Mtu             : {r['mtu']}[B]",
             f" local address:  IP {loc['ip']} QPN {loc['qpn']:#08x} PSN {loc['psn']:#08x} "
             f"RKey {loc['rkey']:#010x} VAddr {loc['addr']:#018x}",
             f" remote address: IP {rem['ip']} QPN {rem['qpn']:#08x} PSN {rem['psn']:#08x} "
             f"RKey {rem['rkey']:#010x} VAddr {rem['addr']:#018x}", bar]
    if r["test"] in ("write_lat", "read_lat"):
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
    if r.get("pacing_lost_bytes"):   # the DCQCN pacer woke late (the CPU, not the protocol, held it back)
        lines.append(f" pacing: {pacing_lost_share(r):.1%} of the DCQCN allowance lost to late wake-ups "
                     f"(up to {r.get('pacing_late_max_s', 0.0) * 1e3:.3g} ms late)")
    return "\n".join(lines)
