"""The pure collective layer: schedules produce exactly what the collective defines (numpy references
computed from the inputs alone), move the bytes the algorithm promises, and broken schedules are named;
nccl-tests' bandwidth formulas; placement; the trace format; the result rows from rank reports."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.collective import metrics, placement, report, verify
from testbed.collective import schedule as S
from testbed.collective import trace as T
from testbed.collective.engine import ScheduleError, simulate
from testbed.errors import SpecError
from testbed.topo import generators

CASES = [("allreduce", "ring"), ("allreduce", "tree"), ("reduce_scatter", "ring"), ("all_gather", "ring"),
         ("broadcast", "ring"), ("all_to_all", "pairwise")]


def run(sched, seed=1, job=1):
    bufs, stats = simulate(sched, [verify.initial_buffers(sched, r, seed, job) for r in range(sched.n)])
    return bufs, stats


@pytest.mark.parametrize("collective,algorithm", CASES)
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("chunks", [1, 3])
def test_every_collective_is_exact(collective, algorithm, n, chunks):
    root = n - 1 if collective == "broadcast" else 0
    sched = S.build(collective, n, 997 + n, algorithm, chunks, root)
    bufs, _ = run(sched)
    for r in range(n):
        assert verify.wrong(sched, r, bufs[r]) == 0, (collective, algorithm, n, chunks, r)


def test_references_are_the_definitions():
    """The references themselves, on a case small enough to write out by hand."""
    sched = S.build("allreduce", 2, 4)
    x0, x1 = verify.make_input(1, 1, 0, 4), verify.make_input(1, 1, 1, 4)
    assert list(verify.expected(sched, 0)[2]) == [int(a) + int(b) for a, b in zip(x0, x1, strict=True)]
    a2a = S.build("all_to_all", 2, 4)
    buf, off, want = verify.expected(a2a, 1)
    assert buf == "out" and list(want) == list(x0[2:4]) + list(x1[2:4])


def test_a_wrong_result_is_counted():
    sched = S.build("allreduce", 4, 64)
    bufs, _ = run(sched)
    bufs[2]["data"][5] += 1
    bufs[2]["data"][9] -= 3
    assert verify.wrong(sched, 2, bufs[2]) == 2
    assert verify.wrong(sched, 1, bufs[1]) == 0


def test_skewed_all_to_all_is_exact_and_skewed():
    counts = S.skewed_counts(4, 1000, hot=1, factor=4.0)
    assert all(sum(row) == 1000 for row in counts)
    assert all(row[1] >= 4 * row[0] - 3 for row in counts)
    sched = S.all_to_all(4, 1000, counts, chunks=2)
    bufs, _ = run(sched)
    assert all(verify.wrong(sched, r, bufs[r]) == 0 for r in range(4))
    assert sched.buffers[1]["out"] == sum(row[1] for row in counts)


@pytest.mark.parametrize("n", [2, 4, 7, 8])
def test_bytes_each_rank_sends(n):
    """Ring allreduce sends 2 (n-1)/n of the buffer per rank; reduce-scatter, all-gather and all-to-all
    (n-1)/n; a ring broadcast every rank but the last sends it once (the busbw factors' premises)."""
    count = 840 * n
    assert S.build("allreduce", n, count).sent_elements(0) == 2 * (n - 1) * count // n
    for coll in ("reduce_scatter", "all_gather", "all_to_all"):
        assert S.build(coll, n, count).sent_elements(1) == (n - 1) * count // n
    b = S.build("broadcast", n, count, chunks=4, root=0)
    assert [b.sent_elements(r) for r in range(n)] == [count] * (n - 1) + [0]


def test_tree_sends_each_rank_at_most_twice_the_buffer():
    sched = S.build("allreduce", 8, 8000, "tree", chunks=4)
    sent = [sched.sent_elements(r) for r in range(8)]
    assert max(sent) <= 2 * 8000 and min(sent) >= 8000 // 2


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 8, 13, 16])
def test_double_binary_tree(n):
    trees = S.double_binary_tree(n)
    for parent, children in trees:
        roots = [r for r in range(n) if parent[r] is None]
        assert len(roots) == 1
        for r in range(n):
            seen, x = set(), r
            while parent[x] is not None:           # every rank reaches the root, no cycle
                assert x not in seen
                seen.add(x)
                x = parent[x]
            for c in children[r]:
                assert parent[c] == r
            assert len(children[r]) <= 2
    if n % 2 == 0:      # the mirror: nobody is an inner node of both trees (NCCL's point)
        inner = [{r for r in range(n) if t[1][r]} for t in trees]
        assert not inner[0] & inner[1]


def test_chunked_ring_pipelines():
    """Piece c of step 1 waits for piece c of step 0 only, not for the whole step."""
    sched = S.ring_allreduce(4, 400, chunks=4)
    ops, deps = sched.ranks[0], sched.deps[0]
    sends = [i for i, op in enumerate(ops) if op.kind == "send"]
    recvs = [i for i, op in enumerate(ops) if op.kind == "recv"]
    step1_first = sends[4]
    assert deps[step1_first] == (recvs[0],)
    assert all(not deps[i] for i in sends[:4])


def test_broken_schedules_are_named():
    good = S.build("allreduce", 3, 30)
    ranks = list(good.ranks)
    ranks[1] = tuple(op for op in ranks[1] if op.kind != "recv")[:]
    broken = S.Schedule("allreduce", "ring", tuple(ranks), good.buffers, 30,
                        deps=tuple(S.hazard_deps(r) for r in ranks))
    with pytest.raises(ScheduleError, match="no matching receive"):
        run(broken)
    bad_size = [list(r) for r in good.ranks]
    i = next(k for k, op in enumerate(bad_size[1]) if op.kind == "recv")
    op = bad_size[1][i]
    bad_size[1][i] = S.Op("recv", op.peer, op.buf, op.offset, op.count - 1, op.reduce)
    sched = S.Schedule("allreduce", "ring", tuple(map(tuple, bad_size)), good.buffers, 30,
                       deps=tuple(S.hazard_deps(r) for r in bad_size))
    with pytest.raises(ScheduleError, match="expects"):
        run(sched)
    # both ranks receive before they send the same region: a deadlock
    dead = (S.Op("recv", 1, "data", 0, 4, reduce=True), S.Op("send", 1, "data", 0, 4))
    dead1 = (S.Op("recv", 0, "data", 0, 4, reduce=True), S.Op("send", 0, "data", 0, 4))
    sched = S.Schedule("allreduce", "x", (dead, dead1), ({"data": 4},) * 2, 4,
                       deps=(S.hazard_deps(dead), S.hazard_deps(dead1)))
    with pytest.raises(ScheduleError, match="deadlock: rank 0"):
        run(sched)


@pytest.mark.parametrize("bad,field", [(dict(n=1, count=8), "ranks"), (dict(n=4, count=3), "count"),
                                       (dict(n=4, count=8, chunks=0), "chunks")])
def test_bad_parameters_name_the_field(bad, field):
    with pytest.raises(SpecError) as err:
        S.ring_allreduce(**bad)
    assert err.value.field == field
    with pytest.raises(SpecError, match="algorithm"):
        S.build("broadcast", 4, 8, "tree")


# -- metrics --------------------------------------------------------------------------------------
def test_busbw_factors_of_nccl_tests():
    size, t = 1 << 20, 0.5
    alg = size * 8 / t                               # 16 777 216 bit/s
    assert metrics.algbw_bps(size, t) == alg
    assert metrics.busbw_bps("allreduce", 4, size, t) == pytest.approx(alg * 1.5)
    assert metrics.busbw_bps("reduce_scatter", 8, size, t) == pytest.approx(alg * 7 / 8)
    assert metrics.busbw_bps("all_gather", 2, size, t) == pytest.approx(alg / 2)
    assert metrics.busbw_bps("all_to_all", 4, size, t) == pytest.approx(alg * 0.75)
    assert metrics.busbw_bps("broadcast", 16, size, t) == alg
    row = metrics.row("allreduce", 4, size, t, scale=1000.0, wrong=0)
    assert row["real_time_us"] == pytest.approx(500.0)
    assert row["real_busbw_gbps"] == pytest.approx(alg * 1.5 * 1000 / 1e9)
    assert "#wrong" in metrics.table_text([row])


def test_rows_from_rank_reports():
    """time = max(end) - max(start) per iteration, warm-up left out, #wrong summed."""
    def rep(rank, starts, ends, wrong=0):
        its = [{"start": s, "end": e, "wrong": wrong, "warmup": k == 0} for k, (s, e) in enumerate(zip(starts, ends,
                                                                                                      strict=True))]
        return {"rank": rank, "runs": [{"collective": "allreduce", "bytes": 4096, "iterations": its,
                                        "sent_bytes": 6144}], "stats": {}}
    reports = [rep(0, [0.0, 10.0, 20.0], [5.0, 12.0, 22.5]), rep(1, [0.1, 10.5, 20.0], [6.0, 12.5, 23.0], wrong=1)]
    rows = report.job_rows(reports, scale=100.0)
    assert rows[0]["times_s"] == pytest.approx([2.0, 3.0])
    assert rows[0]["time_s"] == pytest.approx(2.5)
    assert rows[0]["wrong"] == 3
    assert rows[0]["busbw_bps"] == pytest.approx(4096 * 8 / 2.5 * 2 * 1 / 2)
    assert report.job_span(reports) == (0.1, 23.0)


# -- placement -------------------------------------------------------------------------------------
def test_placement_policies():
    G = generators.fat_tree(4)
    packed = placement.place(G, 4, "packed")
    assert {G.nodes[h]["pod"] for h in packed} == {0}
    spread = placement.place(G, 4, "spread")
    assert len({placement.tor_of(G, h) for h in spread}) == 4
    assert min(placement.ring_hops(G, spread)) >= 3 > min(placement.ring_hops(G, packed))
    second = placement.place(G, 4, "packed", exclude=packed)
    assert not set(second) & set(packed)
    pod3 = placement.place(G, 4, "spread", within=set(placement.pods(G)[3]))
    assert {G.nodes[h]["pod"] for h in pod3} == {3}
    with pytest.raises(SpecError) as err:
        placement.place(G, 17, "packed")
    assert err.value.field == "ranks"
    with pytest.raises(SpecError, match="placement"):
        placement.place(G, 4, "random")


def test_rail_aware_keeps_ring_neighbours_on_a_rail():
    G = generators.rail_optimized(4, 2, 2)
    order = placement.place(G, 8, "rail-aware")
    rails = [G.nodes[h]["gpu"] for h in order]
    same = sum(rails[i] == rails[(i + 1) % 8] for i in range(8))
    assert same == 6                               # only the two wraps between rails cross a spine
    packed = placement.place(G, 8, "packed")
    prails = [G.nodes[h]["gpu"] for h in packed]
    assert sum(prails[i] == prails[(i + 1) % 8] for i in range(8)) < same


# -- traces ----------------------------------------------------------------------------------------
def _trace(**over):
    ops = [[{"id": "fwd", "type": "compute", "seconds": 0.003},
            {"id": "grad", "type": "collective", "collective": "allreduce", "bytes": 4096}],
           [{"id": "fwd", "type": "compute", "seconds": 0.001},
            {"id": "grad", "type": "collective", "collective": "allreduce", "bytes": 4096}]]
    ops[0].append({"id": "act", "type": "send", "peer": 1, "bytes": 256, "deps": ["fwd"]})
    ops[1].append({"id": "act", "type": "recv", "peer": 0, "bytes": 256, "deps": ["fwd"]})
    doc = {"version": 1, "ranks": 2, "iterations": 2, "ops": ops}
    doc.update(over)
    return doc


def test_trace_compiles_and_simulates():
    stats = T.check(T.load_trace(_trace()))
    # the slowest rank's compute gap gates each iteration: 2 x 3 ms in a zero-time network
    assert stats["time_s"] == pytest.approx(0.006)
    assert stats["sent_elements"][0] == 2 * (2 * (2 - 1) * 1024 // 2 + 64)    # ring 2(n-1)/n + the p2p


def test_trace_replay_data_is_exact():
    """Every collective and p2p message of a compiled trace verifies with the payloads both ends derive."""
    tr = T.load_trace(_trace())
    sched, groups = T.compile_trace(tr)
    inputs = []
    for r in range(2):
        bufs = {k: np.zeros(v, dtype=np.int32) for k, v in sched.buffers[r].items()}
        for g in groups[r]:
            tag = f"{g.iteration}.{g.id}"
            if g.type == "collective":
                for name, arr in verify.initial_buffers(g.sub, r, 1, g.job).items():
                    bufs[f"{tag}:{name}"][:] = arr
            elif g.type == "send":
                bufs[f"{tag}:data"][:] = verify.make_input(1, g.job, r, 64)
        inputs.append(bufs)
    out, _ = simulate(sched, inputs)
    for r in range(2):
        for g in groups[r]:
            tag = f"{g.iteration}.{g.id}"
            if g.type == "collective":
                sub = {k.split(":", 1)[1]: v for k, v in out[r].items() if k.startswith(tag + ":")}
                assert verify.wrong(g.sub, r, sub, 1, g.job) == 0
            elif g.type == "recv":
                assert (out[r][f"{tag}:data"] == verify.make_input(1, g.job, 0, 64)).all()


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["ops"][0][1].update(bytes=4095), "ops[0][1].bytes"),
    (lambda d: d["ops"][1][1].update(collective="broadcast"), "ops[1]"),
    (lambda d: d["ops"][0][2].update(peer=0), "ops[0][2].peer"),
    (lambda d: d["ops"][0][2].update(deps=["nope"]), "ops[0][2].deps"),
    (lambda d: d["ops"][0][0].update(colour="red"), "ops[0][0].colour"),
    (lambda d: d.update(version=2), "trace.version"),
    (lambda d: d.update(ranks=3), "trace.ops"),
])
def test_trace_errors_name_the_field(edit, field):
    doc = _trace()
    edit(doc)
    with pytest.raises(SpecError) as err:
        T.load_trace(doc)
    assert err.value.field == field


def test_trace_with_messages_in_opposite_orders_is_refused():
    doc = _trace()
    doc["ops"][0].append({"id": "act2", "type": "send", "peer": 1, "bytes": 128, "deps": ["fwd"]})
    doc["ops"][1].insert(2, {"id": "act2", "type": "recv", "peer": 0, "bytes": 128, "deps": ["fwd"]})
    with pytest.raises(ScheduleError):
        T.check(T.load_trace(doc))


# -- the CLI ---------------------------------------------------------------------------------------


@pytest.fixture
def no_emulation(monkeypatch):
    from testbed.emu import registry

    def trap(self):
        raise AssertionError("bad input reached emulation")
    monkeypatch.setattr(registry.RunRegistry, "__enter__", trap)


@pytest.mark.parametrize("argv,word", [
    (["collective", "run", "--sizes", "6"], "--sizes"),
    (["collective", "run", "--sizes", "lots"], "--sizes"),
    (["collective", "run", "--fabric", "torus"], "--fabric"),
    (["collective", "run", "--collective", "gossip"], "--collective"),
    (["collective", "run", "--algorithm", "tree", "--collective", "broadcast"], "--algorithm"),
    (["collective", "run", "--ranks", "1"], "--ranks"),
    (["collective", "run", "--ranks", "5"], "ranks"),                 # the small fabric has 4 hosts
    (["collective", "run", "--placement", "random"], "--placement"),
    (["collective", "run", "--skew", "3"], "--skew"),
    (["collective", "run", "--link-rate", "5G"], "--link-rate"),
    (["collective", "run", "--jobs", "2", "--pods"], "--pods"),
    (["collective", "run", "--trace", "/nonexistent.json"], "--trace"),
    (["collective", "run", "--nic-rate", "4=25G"], "--nic-rate"),
    (["collective", "run", "--nic-rate", "1=400G"], "--nic-rate"),
    (["collective", "run", "--nic-rate", "1:25G"], "--nic-rate"),
    (["collective", "schedule", "--size", "5"], "--size"),
    (["collective", "run", "--failures", "1s:gray:s0-l0:150%"], "--failures[0].loss"),
    (["collective", "run", "--failures", "1s:down:l0-l1"], "--failures[0].target"),
    (["collective", "run", "--failures", "1s:down:s0-l0,soon:up:s0-l0"], "--failures[1].at"),
    (["collective", "place", "--fabric", "fat-tree-k4", "--ranks", "20"], "ranks"),
    (["run", "collective", "--link-rate", "5G"], "--link-rate"),
    (["run", "collective", "--failures", "1s:down:l0-l1"], "--failures[0].target"),
    (["run", "collective", "--acceptance-only", "--failures", "1s:down:s0-l1"], "--failures"),
    (["bench", "collective", "--sizes", "6"], "--sizes"),
    (["collective", "run", "--ovs-send-buffer", "lots"], "--ovs-send-buffer"),
    (["collective", "run", "--ovs-send-buffer", "1GiB"], "--ovs-send-buffer"),
    (["run", "collective", "--ovs-send-buffer", "1KiB"], "--ovs-send-buffer"),
    (["bench", "collective", "--ovs-send-buffer", "65537"], "--ovs-send-buffer"),
    (["bench", "collective", "--repeats", "0"], "--repeats"),
    (["collective", "run", "--alone"], "--alone"),
    (["collective", "run", "--ranks", "2", "--jobs", "2", "--alone", "--failures", "1s:down:s0-l0"], "--alone"),
])
def test_bad_input_is_one_line_exit_2(no_emulation, argv, word, run_cli):
    code, out, err = run_cli(argv)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and word in err and "Traceback" not in err


def test_schedule_command_verifies_in_memory(run_cli):
    import json

    code, out, _ = run_cli(["collective", "schedule", "--collective", "allreduce", "--ranks", "4", "--size", "64KiB",
                         "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["wrong"] == 0 and doc["sent_over_size"] == [1.5] * 4 and doc["bus_factor"] == 1.5


def test_trace_command(tmp_path, run_cli):
    import json

    f = tmp_path / "t.json"
    f.write_text(json.dumps(_trace()))
    code, out, _ = run_cli(["collective", "trace", str(f), "--json"])
    assert code == 0 and json.loads(out)["ok"]
    f.write_text("{not json")
    code, _, err = run_cli(["collective", "trace", str(f)])
    assert code == 2 and "--trace" in err


# -- the soft-RDMA rank over loopback (no root: sockets only) ---------------------------------------
def test_ranks_over_soft_rdma_loopback(tmp_path):
    """Three ranks (threads, each its own RoCE device on a loopback address) run a ring allreduce and a
    skewed all-to-all through RDMA SENDs; every element checks, and the report times are ordered."""
    import os
    import threading

    from testbed.collective import rank as K

    net = f"127.{20 + os.getpid() % 200}.{os.getpid() // 200 % 250}"
    ips = [f"{net}.{i + 1}" for i in range(3)]
    runs = [{"collective": "allreduce", "bytes": 12288, "chunks": 2},
            {"collective": "all_to_all", "bytes": 12000, "skew": 3.0}]
    results, errors = {}, []

    def one(r):
        try:
            cfg = {"rank": r, "ips": ips, "job": 1, "dir": str(tmp_path), "iters": 1, "warmup": 1, "runs": runs,
                   "timeout_s": 60.0, "qp": {"window": 32, "timeout_s": 0.05}}
            rk = K.Rank(cfg)
            try:
                results[r] = K.run_collectives(rk, cfg)
                rk.barrier.wait("done", 60.0)
            finally:
                rk.close()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(f"rank {r}: {exc!r}")

    threads = [threading.Thread(target=one, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    reports = [{"rank": r, "runs": results[r]} for r in range(3)]
    rows = report.job_rows(reports, scale=1.0)
    assert [r["wrong"] for r in rows] == [0, 0]
    assert all(r["iterations"] == 1 and r["time_s"] > 0 for r in rows)
    assert results[0][0]["sent_bytes"] == 2 * 2 * 12288 // 3
    # each op's time from the iteration's start: a receive that a later send forwards comes before it
    from testbed.collective import schedule as S

    sched = S.build("allreduce", 3, 12288 // 4, None, 2)
    for r in range(3):
        it = results[r][0]["iterations"][-1]
        span = it["end"] - it["start"]
        assert len(it["op_s"]) == len(sched.ranks[r]) and all(0 <= t <= span for t in it["op_s"])
        assert all(it["op_s"][j] <= it["op_s"][i] for i, d in enumerate(sched.deps[r]) for j in d)
        assert 0 < it["cpu_s"]


def test_loss_ledger_and_drop_counters():
    import json

    qdisc = json.dumps([{"kind": "htb", "dev": "s1-eth1", "root": True, "drops": 5},
                        {"kind": "pfifo", "dev": "s1-eth1", "parent": "1:10", "drops": 5},   # inside the root's 5
                        {"kind": "htb", "dev": "eth0", "root": True, "drops": 100}])
    link = json.dumps([{"ifname": "s1-eth1", "stats64": {"rx": {"dropped": 1}, "tx": {"dropped": 2}}},
                       {"ifname": "lo", "stats64": {"rx": {"dropped": 50}, "tx": {"dropped": 0}}}])
    assert report.counted_drops(qdisc, link, {"s1-eth1"}) == 8
    reps = [{"stats": {"tx_packets": 100, "rx_packets": 90, "device": {"tx_enobufs": 1}}},
            {"stats": {"tx_packets": 95, "rx_packets": 95, "device": {"rx_unknown_qp": 2}}}]
    led = report.loss_ledger(reps, counted=4)
    assert led["lost"] == 10 and led["unattributed"] == 10 - 4 - 1 - 2


def test_ovs_counters():
    text = """netdev@ovs-netdev:
  lookups: hit:14304 missed:849 lost:4
  port 1: l0-eth1
    RX packets:12 errors:0 dropped:3 overruns:2 frame:0
    TX packets:52788 errors:0 dropped:1 aborted:0 carrier:0
  port 2: t9-eth1
    RX packets:12 errors:0 dropped:100 overruns:0 frame:0
"""
    assert report.ovs_port_drops(text, {"l0-eth1"}) == 6
    assert report.upcalls_lost(text) == 4


def test_fan_in_sets_the_window():
    from testbed.collective.runner import INCAST_PACKETS, JobRun, fan_in_of

    hosts = tuple(f"h{i}" for i in range(8))
    ring = JobRun("a", hosts, runs=({"collective": "allreduce", "algorithm": "ring", "bytes": 64},))
    tree = JobRun("b", hosts, runs=({"collective": "allreduce", "algorithm": "tree", "bytes": 64},))
    a2a = JobRun("c", hosts, runs=({"collective": "all_to_all", "bytes": 64},))
    assert [fan_in_of(j) for j in (ring, tree, a2a)] == [1, 2, 7]
    assert INCAST_PACKETS // fan_in_of(a2a) * 7 <= INCAST_PACKETS


def test_a_ring_gets_the_larger_window_only_with_the_raised_send_buffer():
    from testbed.collective.runner import INCAST_PACKETS, MIN_WINDOW, RING_WINDOW, WINDOW, qp_window

    # the default send socket holds ~92 frames for the whole fabric: every job keeps the incast budget
    assert [qp_window(WINDOW, f, False) for f in (1, 2, 7)] == [WINDOW, min(WINDOW, INCAST_PACKETS // 2),
                                                                 max(MIN_WINDOW, INCAST_PACKETS // 7)]
    # raised: only a ring's one QP into each host grows (32 frames left its hops idle); fan-in > 1 unchanged
    assert qp_window(WINDOW, 1, True) == RING_WINDOW > WINDOW
    assert [qp_window(WINDOW, f, True) for f in (2, 7)] == [qp_window(WINDOW, f, False) for f in (2, 7)]
    assert qp_window(RING_WINDOW * 2, 1, True) == RING_WINDOW * 2      # never shrinks a larger one


def test_alone_summary_slowdowns_and_the_links_two_jobs_shared():
    """--alone: each job's JCT alone vs together, and a core link both jobs used alone named shared."""
    from testbed.collective import experiment as X

    G = X.fabric_graph("fat-tree-k4")

    def run(jobs, links):
        return {"jobs": [{"name": n, "jct_s": t} for n, t in jobs], "health": {"ok": True, "reasons": []},
                "links": [{"link": k, "bytes": b, "utilisation": 0.0} for k, b in links.items()]}

    alone = {"job1": run([("job1", 2.0)], {"t0->a0": 10**6, "a0->cr0": 10**6, "h0->t0": 10**6}),
             "job2": run([("job2", 4.0)], {"t2->a2": 10**6, "a2->cr0": 10**6})}
    alone["job2"]["health"] = {"ok": False, "reasons": ["machine CPU 97%"]}
    alone["job1"]["links"].append({"link": "cr0->a1", "bytes": 10**6, "utilisation": 0.0})
    alone["job2"]["links"].append({"link": "cr0->a1", "bytes": 10**6, "utilisation": 0.0})
    both = run([("job1", 2.2), ("job2", 4.0)], {"t0->a0": 10**6, "t2->a2": 10**6, "cr0->a1": 2 * 10**6})
    a = X.alone_summary(alone, both, G)
    assert a["slowdown"] == {"job1": 1.1, "job2": 1.0}
    assert a["shared_links"] == ["cr0->a1"] and a["above_links"] == ["cr0->a1"]
    assert "h0->t0" not in {r["link"] for r in a["rows"]}
    line = X.alone_line(a)
    assert "job1 2.000 -> 2.200 s (x1.100)" in line and "job2 4.000 -> 4.000 s (x1.000, alone run UNHEALTHY)" in line
    assert "used by two jobs alone: cr0->a1" in line
