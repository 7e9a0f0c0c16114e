"""Aggregation protocol without root: packets, quantization, the switch model, whole allreduces in-process."""

from __future__ import annotations

import random

import numpy as np
import pytest

from testbed.agg import quant
from testbed.agg.model import DROP, MULTICAST, SPILL, UNICAST, JobEntry, SwitchModel, check_partitions
from testbed.agg.protocol import ELEMS, FLAG_RESULT, AggHeader, Stat, chunks_for, decode, encode, slot_of
from testbed.agg.ps import ParamServer, parse_jobs
from testbed.agg.stream import WorkerStream
from testbed.agg.tensors import expected_sum, make_tensor
from testbed.errors import SpecError


def vec(value: int) -> np.ndarray:
    return np.full(ELEMS, value, dtype=np.int32)


def hdr(worker, slot=0, shadow=0, seq=0, job=1, **kw) -> AggHeader:
    return AggHeader(job=job, worker=worker, slot=slot, shadow=shadow, seq=seq, **kw)


# -- packets ---------------------------------------------------------------------------------------

def test_encode_decode_round_trip_keeps_every_field():
    h = AggHeader(job=7, worker=31, slot=1023, shadow=1, seq=2 ** 32 - 1, flags=FLAG_RESULT, exponent=-5)
    values = np.arange(-128, 128, dtype=np.int32) * 1000003
    payload = encode(h, values)
    assert len(payload) == 12 + 4 * ELEMS
    assert payload[4:6] == (0x8000 | 1023).to_bytes(2, "big")      # shadow bit on top of the index
    assert payload[3] == 128 - 5                                     # biased exponent
    h2, v2 = decode(payload)
    assert h2 == h and np.array_equal(v2, values)


def test_bad_fields_are_rejected_naming_the_field():
    with pytest.raises(SpecError, match="agg.slot"):
        hdr(0, slot=40000).pack()
    with pytest.raises(SpecError, match="agg.values"):
        encode(hdr(0), np.zeros(3, dtype=np.int32))
    with pytest.raises(SpecError, match="int32"):
        encode(hdr(0), np.zeros(ELEMS, dtype=np.float32))


def test_slot_schedule_alternates_copies():
    assert [slot_of(c, 4) for c in range(9)] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1),
                                                 (3, 1), (0, 0)]
    assert chunks_for(ELEMS + 1) == 2


# -- quantization ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 3, 8, 32])
def test_quantized_sum_never_overflows_and_stays_within_bound(n):
    rng = np.random.default_rng(n)
    xs = [(rng.standard_normal(ELEMS) * 10.0 ** rng.uniform(-20, 20)).astype(np.float32) for _ in range(n)]
    xs[0][0] = np.float32(np.max(np.abs(np.concatenate(xs)))) * 1  # a worker holding the largest value
    e = max(quant.chunk_exponent(x) for x in xs)
    total = np.sum([quant.quantize(x, e, n).astype(np.int64) for x in xs], axis=0)
    assert np.max(np.abs(total)) < 2 ** 31
    approx = quant.dequantize(total.astype(np.int32), e, n).astype(np.float64)
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    assert np.all(np.abs(approx - exact) <= quant.error_bound(e, n) + np.abs(exact) * 2.0 ** -23)


def test_chunk_exponent_edges():
    assert quant.chunk_exponent(np.zeros(4, dtype=np.float32)) == quant.MIN_EXPONENT
    assert quant.chunk_exponent(np.array([1.0], dtype=np.float32)) == 1       # 1 < 2**1
    assert quant.chunk_exponent(np.array([-0.75], dtype=np.float32)) == 0
    with pytest.raises(SpecError, match="NaN"):
        quant.chunk_exponent(np.array([np.nan], dtype=np.float32))


def test_quantize_refuses_an_exponent_below_the_data():
    with pytest.raises(SpecError, match="exponent"):
        quant.quantize(np.array([1000.0] * 4), exponent=2, n_workers=1)


# -- switch model: the slot lifecycle ---------------------------------------------------------------

def model(n=3, size=4, limit=8, base=0, job=1):
    return SwitchModel([JobEntry(job=job, base=base, size=size, limit=limit, members=(1 << n) - 1, mgrp=job)])


def test_lifecycle_first_duplicate_completion_shadow_and_reuse():
    m = model(n=3)
    assert m.process(hdr(0, exponent=3), vec(1)).action == DROP                   # first contribution
    assert m.process(hdr(0), vec(100)).stat is Stat.DUPLICATE                      # ignored
    assert m.process(hdr(1, exponent=7), vec(2)).stat is Stat.CONTRIB
    done = m.process(hdr(2, exponent=5), vec(4))
    assert done.action == MULTICAST and done.header.is_result and done.header.exponent == 7
    assert np.array_equal(done.values, vec(7))                                     # duplicate not added
    again = m.process(hdr(1), vec(999))                                            # lost result
    assert again.action == UNICAST and np.array_equal(again.values, vec(7))
    # next use of the slot: other copy; then copy 0 again for chunk 8 with fresh values
    for w in range(3):
        m.process(hdr(w, shadow=1, seq=4), vec(10))
    assert m.pool.bitmap(0, 0) == 0                                                # cleared by copy 1
    for w in range(2):
        assert m.process(hdr(w, seq=8), vec(1)).action == DROP
    assert np.array_equal(m.process(hdr(2, seq=8), vec(1)).values, vec(3))         # no stale 7 left


def test_malformed_packets_are_dropped_and_counted_without_touching_slots():
    m = SwitchModel([JobEntry(1, base=0, size=4, limit=8, members=0b11, mgrp=1),
                     JobEntry(2, base=4, size=4, limit=4, members=0b11, mgrp=2)])
    m.process(hdr(0, job=2), vec(5))
    cases = [(hdr(0, job=9), Stat.BAD_JOB), (hdr(0, count=64), Stat.BAD_COUNT),
             (hdr(5), Stat.BAD_WORKER), (hdr(0, slot=8), Stat.BAD_INDEX), (hdr(0, job=2, slot=4), Stat.BAD_INDEX)]
    for h, stat in cases:
        before = m.stats[stat]
        v = m.process(h, vec(1000))
        assert (v.action, v.stat) == (DROP, stat)
        assert m.stats[stat] == before + 1
    assert np.array_equal(m.process(hdr(1, job=2), vec(1)).values, vec(6))        # job 2 untouched


def test_index_beyond_switch_slots_spills_to_the_ps():
    v = model(size=2, limit=4).process(hdr(0, slot=3), vec(1))
    assert v.action == SPILL and v.stat is Stat.SPILL


def test_partitions_must_not_overlap():
    with pytest.raises(SpecError, match="also job 1"):
        check_partitions([JobEntry(1, 0, 8, 8, 1, 1), JobEntry(2, 4, 8, 8, 1, 2)], pool_slots=1024)
    with pytest.raises(SpecError, match="exceed"):
        check_partitions([JobEntry(1, 1020, 8, 8, 1, 1)], pool_slots=1024)


def test_ps_completes_and_answers_retransmissions():
    ps = ParamServer(parse_jobs("1:2"))
    assert ps.on_packet(encode(hdr(0, slot=5), vec(1)), ("10.0.0.1", 1)) == []
    out = ps.on_packet(encode(hdr(1, slot=5), vec(2)), ("10.0.0.2", 1))
    assert sorted(a for _, a in out) == [("10.0.0.1", 1), ("10.0.0.2", 1)]
    assert np.array_equal(decode(out[0][0])[1], vec(3))
    again = ps.on_packet(encode(hdr(0, slot=5), vec(1)), ("10.0.0.1", 1))
    assert [a for _, a in again] == [("10.0.0.1", 1)]
    with pytest.raises(SpecError, match="--jobs"):
        parse_jobs("1-8")


# -- whole allreduces through the model, with loss ----------------------------------------------------

def simulate(jobs, tensors, window, loss=0.0, seed=0, size=None, limit=None):
    """Event loop: workers -> SwitchModel (-> PS) -> workers, each packet lost with probability ``loss``."""
    rng = random.Random(seed)
    entries, base = [], 0
    for job, ts in zip(jobs, tensors, strict=True):
        entries.append(JobEntry(job, base=base, size=size if size is not None else window,
                                limit=limit or window, members=(1 << len(ts)) - 1, mgrp=job))
        base += window
    sw = SwitchModel(entries)
    ps = ParamServer({job: len(ts) for job, ts in zip(jobs, tensors, strict=True)})
    streams = {(job, r): WorkerStream(job=job, worker=r, n_workers=len(ts), tensor=t, window=window,
                                      timeout=1.0)
               for job, ts in zip(jobs, tensors, strict=True) for r, t in enumerate(ts)}
    now, queue = 0.0, []
    for key, s in streams.items():
        queue += [(key, p) for p in s.start(now)]
    while not all(s.done for s in streams.values()):
        now += 0.1
        if not queue:
            for key, s in streams.items():
                queue += [(key, p) for p in s.on_timer(now + 1.0)]
            now += 1.0
        batch, queue = queue, []
        for key, payload in batch:
            if rng.random() < loss:
                continue
            h, v = decode(payload)
            verdict = sw.process(h, v)
            if verdict.action == MULTICAST:
                out = [((h.job, r), encode(verdict.header, verdict.values)) for r in range(len(tensors[0]))
                       if (h.job, r) in streams]
            elif verdict.action == UNICAST:
                out = [(key, encode(verdict.header, verdict.values))]
            elif verdict.action == SPILL:
                out = [((h.job, a[1]), p) for p, a in ps.on_packet(payload, (h.job, h.worker))]
            else:
                out = []
            for dst, reply in out:
                if rng.random() >= loss:
                    queue += [(dst, p) for p in streams[dst].on_packet(reply, now)]
    return {k: s.result() for k, s in streams.items()}, sw


def test_int32_allreduce_is_exact_under_loss():
    ts = [make_tensor(3, 1, r, 5000, "int32") for r in range(8)]
    results, sw = simulate([1], [ts], window=8, loss=0.05, seed=1)
    want = expected_sum(3, 1, 8, 5000, "int32")
    assert all(np.array_equal(r, want) for r in results.values())
    assert sw.stats[Stat.SHADOW] + sw.stats[Stat.DUPLICATE] > 0        # loss was actually recovered


def test_two_jobs_and_ps_fallback_are_exact():
    t1 = [make_tensor(4, 1, r, 3000, "int32") for r in range(4)]
    t2 = [make_tensor(4, 2, r, 3000, "int32") for r in range(4)]
    results, sw = simulate([1, 2], [t1, t2], window=6, loss=0.02, seed=2, size=4, limit=6)
    assert sw.stats[Stat.SPILL] > 0
    for job, ts in ((1, t1), (2, t2)):
        want = np.sum(ts, axis=0, dtype=np.int64).astype(np.int32)
        assert all(np.array_equal(results[(job, r)], want) for r in range(4))


def test_float32_allreduce_within_documented_bound():
    ts = [make_tensor(5, 1, r, 4000, "float32") for r in range(8)]
    results, _ = simulate([1], [ts], window=4, loss=0.03, seed=3)
    exact = expected_sum(5, 1, 8, 4000, "float32")
    bound = quant.tensor_error_bound(ts, ELEMS)
    for r in results.values():
        assert r.dtype == np.float32
        assert np.all(np.abs(r.astype(np.float64) - exact) <= bound)
    assert np.max(np.abs(results[(1, 0)] - exact)) > 0                  # genuinely quantized


def test_stream_rejects_bad_parameters():
    with pytest.raises(SpecError, match="dtype"):
        WorkerStream(job=1, worker=0, n_workers=2, tensor=np.zeros(4), window=2, timeout=1)
    with pytest.raises(SpecError, match="window"):
        WorkerStream(job=1, worker=0, n_workers=2, tensor=np.zeros(4, np.int32), window=0, timeout=1)
