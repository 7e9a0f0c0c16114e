"""One rank of a collective job over the soft-RDMA endpoint: ``python -m testbed.collective.rank CONFIG``.

The runner starts one per host, inside the host's namespace. Each opens a soft RoCEv2 device on its
address and one RC QP per peer (QP numbers and first PSNs derived from job and ranks, so nothing has to be
exchanged), executes the schedule of every run with RDMA SENDs into pre-posted receive buffers, and
checks every element of its result against the reference (:mod:`testbed.collective.verify`)::

    per run (collective, size) and iteration:
        reset buffers to the inputs -> post one receive WR per incoming block (its own staging slot)
        -> barrier (a file per rank in the job folder; the device keeps progressing while it waits)
        -> t0 -> engine.advance(post=snapshot + SEND, apply=copy/add from staging) / device.progress
        -> every op done and every SEND acknowledged -> t1 -> #wrong
    last: a closing barrier (peers may still need our ACKs), then the report CONFIG-dir/rank-R.json

The configuration is JSON (see :func:`main`); times in the report are wall-clock (``time.time()``), one
clock for every namespace of the machine, so the runner can take max(start) .. max(end) across ranks.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from testbed.collective import schedule as S
from testbed.collective import verify as V
from testbed.collective.engine import RankEngine, apply_block

QP_BASE = 0x10000


def qp_number(job: int, me: int, peer: int) -> int:
    """The QP rank ``me`` of ``job`` uses towards ``peer`` (fixed: nothing is exchanged out of band)."""
    return QP_BASE + (job % 64) * 4096 + (me % 64) * 64 + peer % 64


def first_psn(me: int, peer: int) -> int:
    return (me * 7919 + peer * 104729) & 0xFFFFFF


class Barrier:
    """Files ``barrier-NAME-RANK`` in the job folder; waiting drives the device (no fixed sleep)."""

    def __init__(self, folder: Path, rank: int, n: int, dev):
        self.folder, self.rank, self.n, self.dev = folder, rank, n, dev

    def wait(self, name: str, timeout: float) -> None:
        (self.folder / f"barrier-{name}-{self.rank}").touch()
        want = [self.folder / f"barrier-{name}-{r}" for r in range(self.n)]
        deadline = time.monotonic() + timeout
        while not all(p.exists() for p in want):
            if time.monotonic() > deadline:
                missing = [r for r, p in enumerate(want) if not p.exists()]
                raise TimeoutError(f"barrier {name}: ranks {missing} did not arrive within {timeout:g}s")
            self.dev.progress(timeout=0.002)


class Rank:
    def __init__(self, cfg: dict):
        from testbed.rdma.dcqcn import DcqcnParams
        from testbed.rdma.device import Device
        from testbed.rdma.qp import QpConfig, Remote
        from testbed.rdma.verbs import CompletionQueue

        self.cfg = cfg
        self.rank, self.ips, self.job = cfg["rank"], cfg["ips"], cfg.get("job", 1)
        self.n = len(self.ips)
        self.seed = cfg.get("seed", 1)
        q = cfg.get("qp", {})
        self.qpcfg = QpConfig(mtu=q.get("mtu", 1024), window=q.get("window", 128), timeout=q.get("timeout_s", 0.05),
                              dcqcn=DcqcnParams(**q["dcqcn"]) if q.get("dcqcn") else None,
                              retry_limit=q.get("retry_limit", 7))
        self.dev = Device(self.ips[self.rank])
        self.pd, self.cq = self.dev.alloc_pd(), CompletionQueue()
        self.qps = {}
        for p in range(self.n):
            if p == self.rank:
                continue
            qp = self.dev.create_qp(self.pd, self.cq, self.qpcfg, qpn=qp_number(self.job, self.rank, p))
            self.dev.connect(qp, Remote(qp_number(self.job, p, self.rank), first_psn(p, self.rank), self.ips[p],
                                        self.dev.port), first_psn(self.rank, p))
            self.qps[p] = qp
        self.barrier = Barrier(Path(cfg["dir"]), self.rank, self.n, self.dev)
        #: wall-clock time of every QP timeout, so the runner can tell those inside a failure window
        self.timeout_times: list[float] = []

    def close(self) -> None:
        self.dev.close()

    # -- one execution of a schedule -------------------------------------------------------------------
    def execute(self, sched, buffers: dict, timeout: float, tag: str) -> dict:
        from testbed.rdma.verbs import RdmaError, WcOpcode, WcStatus

        ops, deps = sched.ranks[self.rank], sched.deps[self.rank]
        soff, roff, stot, rtot = {}, {}, 0, 0
        for i, op in enumerate(ops):
            if op.kind == "send":
                soff[i], stot = stot, stot + op.count
            elif op.kind == "recv":
                roff[i], rtot = rtot, rtot + op.count
        sstage = np.zeros(max(1, stot), dtype=np.int32)
        rstage = np.zeros(max(1, rtot), dtype=np.int32)
        smr, rmr = self.pd.reg_mr(sstage), self.pd.reg_mr(rstage)
        for i in roff:   # program order: an RC QP completes receives in the order they were posted
            self.qps[ops[i].peer].post_recv(i, rmr, roff[i] * 4, ops[i].count * 4)
        sends = len(soff)
        engine = RankEngine(ops, deps)

        def post(i):
            op = ops[i]
            sstage[soff[i]:soff[i] + op.count] = buffers[op.buf][op.offset:op.offset + op.count]
            self.qps[op.peer].post_send(i, smr, soff[i] * 4, op.count * 4)

        def apply(i):
            op = ops[i]
            if op.kind == "copy":
                apply_block(op, buffers, buffers[op.src_buf][op.src_offset:op.src_offset + op.count].copy())
            else:
                apply_block(op, buffers, rstage[roff[i]:roff[i] + op.count])

        self.barrier.wait(tag, timeout)
        t0, cpu0 = time.time(), time.process_time()
        acked = 0
        deadline = time.monotonic() + timeout
        while not (engine.finished and acked == sends):
            now = time.time()
            engine.advance(now, post, apply)
            # nothing to post until a datagram arrives or a delay ends, and progress() wakes on both:
            # a long idle wait costs no latency and leaves the shared cores to the other ranks and OVS
            idle = 0.02
            nd = engine.next_deadline()
            self.dev.progress(timeout=min(idle, max(0.0, nd - now)) if nd is not None else idle)
            fired = sum(q.stats.timeouts for q in self.qps.values()) - len(self.timeout_times)
            if fired > 0:
                self.timeout_times += [now] * fired
            for wc in self.cq.poll(256):
                if wc.status is not WcStatus.SUCCESS:
                    qp = self.qps.get(ops[wc.wr_id].peer) if wc.wr_id < len(ops) else None
                    raise RdmaError(f"rank {self.rank} op {wc.wr_id}: {wc.status.value}"
                                    + (f" ({qp.error})" if qp is not None and qp.error else ""))
                if wc.opcode in (WcOpcode.RECV, WcOpcode.RECV_RDMA_WITH_IMM):
                    engine.arrived(wc.wr_id)
                else:
                    acked += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {self.rank} {tag}: {len(engine.pending())} ops and {sends - acked} "
                                   f"acknowledgements outstanding after {timeout:g}s")
        t1, cpu = time.time(), time.process_time() - cpu0
        self.pd.dereg_mr(smr)
        self.pd.dereg_mr(rmr)
        # cpu_s / (end - start): how much of one core this rank's endpoint used (the machine has 2 for all)
        return {"start": t0, "end": t1, "cpu_s": round(cpu, 4), "finished_at": engine.finished_at}

    def stats(self) -> dict:
        keys = ("tx_packets", "rx_packets", "retransmissions", "timeouts", "naks_rx", "naks_tx", "cnps_rx",
                "duplicates_rx", "out_of_order_rx", "acked_bytes")
        return {k: sum(getattr(q.stats, k) for q in self.qps.values()) for k in keys} | {"device": dict(self.dev.stats)}


def run_collectives(rank: Rank, cfg: dict) -> list[dict]:
    out = []
    for k, run in enumerate(cfg["runs"]):
        count = run["bytes"] // S.ELEMENT_BYTES
        counts = None
        if run["collective"] == "all_to_all" and run.get("incast") is not None:
            counts = S.incast_counts(rank.n, count, run["incast"])
        elif run["collective"] == "all_to_all" and run.get("skew", 1.0) != 1.0:
            counts = S.skewed_counts(rank.n, count, run.get("hot", 0), run["skew"])
        sched = S.build(run["collective"], rank.n, count, run.get("algorithm"), run.get("chunks", 1),
                        run.get("root", 0), counts)
        iters = []
        for it in range(cfg.get("warmup", 0) + cfg.get("iters", 1)):
            bufs = V.initial_buffers(sched, rank.rank, rank.seed, rank.job)
            t = rank.execute(sched, bufs, cfg.get("timeout_s", 300.0), f"{k}-{it}")
            # when each op ran, from the iteration's start: a send's post, a receive's arrival and apply
            # (where a link idled between steps, docs/collectives.md "Where the ring's time went")
            t["op_s"] = [round(x - t["start"], 5) for x in t.pop("finished_at")]
            t["wrong"] = V.wrong(sched, rank.rank, bufs, rank.seed, rank.job)
            t["warmup"] = it < cfg.get("warmup", 0)
            iters.append(t)
        out.append({**run, "count": count, "sent_bytes": sched.sent_elements(rank.rank) * 4, "iterations": iters})
    return out


def run_trace(rank: Rank, cfg: dict) -> dict:
    from testbed.collective import trace as T

    trace = T.load_trace(cfg["trace"])
    sched, groups = T.compile_trace(trace, cfg.get("scale", 1.0), cfg.get("chunks", 1))
    mine = groups[rank.rank]
    bufs = {name: np.zeros(size, dtype=np.int32) for name, size in sched.buffers[rank.rank].items()}
    for g in mine:
        tag = f"{g.iteration}.{g.id}"
        if g.type == "collective":
            for name, arr in V.initial_buffers(g.sub, rank.rank, rank.seed, g.job).items():
                bufs[f"{tag}:{name}"][:] = arr
        elif g.type == "send":
            bufs[f"{tag}:data"][:] = V.make_input(rank.seed, g.job, rank.rank, len(bufs[f"{tag}:data"]))
    t = rank.execute(sched, bufs, cfg.get("timeout_s", 300.0), "trace")
    ops = []
    for g in mine:
        tag = f"{g.iteration}.{g.id}"
        wrong = 0
        if g.type == "collective":
            sub_bufs = {k.split(":", 1)[1]: v for k, v in bufs.items() if k.startswith(f"{tag}:")}
            wrong = V.wrong(g.sub, rank.rank, sub_bufs, rank.seed, g.job)
        elif g.type == "recv":
            op = sched.ranks[rank.rank][g.first]
            want = V.make_input(rank.seed, g.job, op.peer, op.count)
            wrong = int(np.count_nonzero(bufs[f"{tag}:data"] != want))
        ops.append({"iteration": g.iteration, "id": g.id, "type": g.type, "end": t["finished_at"][g.end],
                    "wrong": wrong})
    return {"start": t["start"], "end": t["end"], "ops": ops}


def main(argv: list[str]) -> int:
    """``CONFIG`` (a JSON file): rank, ips (rank order), job, dir (the job folder), qp {mtu, window,
    timeout_s, dcqcn}, seed, iters, warmup, timeout_s, and either runs [{collective, bytes, algorithm,
    chunks, root, skew, hot, incast}] or trace (a trace document, :mod:`testbed.collective.trace`) with scale."""
    if len(argv) != 1:
        print("usage: python -m testbed.collective.rank CONFIG.json", file=sys.stderr)
        return 2
    cfg = json.loads(Path(argv[0]).read_text())
    folder = Path(cfg["dir"])
    report = {"rank": cfg["rank"], "job": cfg.get("job", 1), "pid": os.getpid()}
    rank = None
    try:
        rank = Rank(cfg)
        g = cfg.get("global")
        if g:   # every rank of every job: concurrent jobs start together
            Barrier(Path(g["dir"]), g["index"], g["n"], rank.dev).wait("start", cfg.get("timeout_s", 300.0))
        if "trace" in cfg:
            report["trace"] = run_trace(rank, cfg)
        else:
            report["runs"] = run_collectives(rank, cfg)
        rank.barrier.wait("done", cfg.get("timeout_s", 300.0))
        report["stats"] = rank.stats()
        report["timeout_times"] = rank.timeout_times
        code = 0
    except Exception as exc:  # noqa: BLE001 - the runner reads the reason from the report
        report["error"] = f"{type(exc).__name__}: {exc}"
        if rank is not None:
            report["stats"] = rank.stats()
            report["timeout_times"] = rank.timeout_times
        code = 1
    finally:
        if rank is not None:
            rank.close()
    tmp = folder / f"rank-{cfg['rank']}.json.tmp"
    tmp.write_text(json.dumps(report))
    tmp.rename(folder / f"rank-{cfg['rank']}.json")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
