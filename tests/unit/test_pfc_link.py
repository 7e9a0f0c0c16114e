"""PFC in the link data path (testbed/pfc/link.py), against values derived by hand, and the compiled core
(testbed/links/core/pfc.c) against it, trace for trace.

The model is the reference the C core must reproduce; its behaviour is checked here from first principles:
a 1000-byte frame takes 1 ms at 8 Mbit/s, a PAUSE of Q quanta at the real 25 Gbit/s lasts Q x 512 / 25e9 s,
times the dilation. The core is compiled with the system compiler: a missing compiler fails (setup installs
gcc), it does not skip.
"""

from __future__ import annotations

import functools
import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from testbed.dilation import Dilation
from testbed.links.model import LinkParams, LossModel, RedParams
from testbed.pfc.config import PfcConfig, WatchdogParams
from testbed.pfc.link import PfcDirection, run_core_trace, trace_lines
from testbed.pfc.state import PauseFrame
from testbed.pfc.wire import decode, encode

REAL = 25e9
SCALE = 1000.0
ROCE_TOS, LOSSY_TOS = 26 << 2 | 2, 0


@functools.lru_cache(maxsize=None)
def frame(tos: int, size: int = 1000) -> bytes:
    return bytes(Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b") / IP(tos=tos) / UDP(dport=4791)
                 / Raw(b"\x00" * (size - 42)))


def pause(quanta: int) -> bytes:
    return encode(PauseFrame.of({3: quanta}), "02:00:00:00:00:09")


def make(xoff=3000, xon=1000, headroom=2000, limit=5000, delay_s=0.0, **kw) -> PfcDirection:
    params = LinkParams(rate_bps=8e6, delay_s=delay_s, limit=limit, limit_unit="bytes", **kw)
    return PfcDirection(params, PfcConfig(priorities=(3,), xoff_bytes=xoff, xon_bytes=xon), REAL, headroom,
                        Dilation(SCALE), random.Random(1))


def test_xoff_sends_pause_upstream_and_headroom_overflow_drops():
    d = make()
    fates = [d.admit(0.0, frame(ROCE_TOS)) for _ in range(6)]
    # the first starts at once (leaves the buffer); 2..4 fill to 3000 = xoff; 5, 6 fit the 2000 B headroom
    assert fates == ["queued"] * 6
    assert [f.times for _, f in d.upstream] == [((3, 0xFFFF),)]
    assert d.admit(0.0, frame(ROCE_TOS)) == "pfc_headroom"              # 5000 + 1000 > xoff + headroom
    assert d.prio[3]["drop_pfc_headroom"] == 1 and d.prio[3]["drop_tail"] == 0
    # lossless frames ignore the tail limit (5000 B is full), lossy ones do not
    assert d.admit(0.0, frame(LOSSY_TOS)) == "tail"


def test_departures_send_xon_at_xon_threshold():
    d = make()
    for _ in range(4):
        d.admit(0.0, frame(ROCE_TOS))                                  # PAUSE at 3000 B
    d.upstream.clear()
    d.advance(2.5e-3)                                                  # starts at 1 ms and 2 ms
    assert [t for t, _ in d.released] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert [(t, f.times) for t, f in d.upstream] == [(2e-3, ((3, 0),))]  # 1000 B left = xon -> XON at 2 ms


def test_received_pause_holds_only_its_priority_for_the_dilated_quanta():
    d = make()
    assert d.receive(0.0, pause(1000)) is True
    hold = 1000 * 512 / REAL * SCALE                                    # 20.48 ms emulated
    d.admit(1e-3, frame(ROCE_TOS))
    d.admit(1e-3, frame(LOSSY_TOS))
    d.advance(hold - 1e-6)
    assert [(t, len(f)) for t, f in d.released] == [(pytest.approx(2e-3), 1000)]   # the lossy one only
    assert d.paused_mask(hold - 1e-6) == 1 << 3
    d.advance(hold)
    assert [t for t, _ in d.released][1] == pytest.approx(hold + 1e-3)           # resumes on expiry
    assert d.egress.paused_time(hold, 3) == pytest.approx(hold)


def test_xon_resumes_before_expiry_and_a_frame_on_the_wire_finishes():
    d = make()
    d.admit(0.0, frame(ROCE_TOS))                                      # on the wire 0 .. 1 ms
    d.admit(0.0, frame(ROCE_TOS))
    d.receive(0.5e-3, pause(0xFFFF))                                    # the first finishes, the second waits
    d.receive(5e-3, pause(0))
    d.advance(10e-3)
    assert [t for t, _ in d.released] == pytest.approx([1e-3, 6e-3])
    assert d.egress.counters[3] == {"pause_received": 1, "xon_received": 1, "drop_pfc_watchdog": 0}


def test_refresh_keeps_the_sender_paused_while_the_queue_stays_full():
    d = make()
    d.receive(0.0, pause(0xFFFF))                                       # our own egress is held too
    for _ in range(4):
        d.admit(0.0, frame(ROCE_TOS))
    refresh = 0.5 * 0xFFFF * 512 / REAL * SCALE
    d.advance(2.5 * refresh)
    # refreshed at half the pause time; the peer's pause (2 x refresh) expires, the queue drains at 1 ms a
    # frame from 2 x refresh and falls to xon (1000 B) after two starts: XON
    assert [t for t, _ in d.upstream] == pytest.approx([0.0, refresh, 2 * refresh, 2 * refresh + 2e-3])
    assert [f.times for _, f in d.upstream] == [((3, 0xFFFF),)] * 3 + [((3, 0),)]
    assert d.next_event() is None


CABLE = 4.5e-3   # one way, emulated: 4.5 frame times of 1000 B at 8 Mbit/s


def test_a_received_pause_acts_one_cable_delay_after_it_was_read():
    """By hand: PAUSE (1000 quanta = 20.48 ms emulated) read at 0 on a link of 4.5 ms one way, six 1000-byte
    priority-3 frames queued at 0. The PAUSE reaches the sender at 4.5 ms: frames start at 0, 1, 2, 3, 4 ms
    (each 1 ms on the wire), the sixth is held until 4.5 + 20.48 ms and starts then. Releases are start + 1 ms
    + 4.5 ms. Python reference and C core alike."""
    hold = 1000 * 512 / REAL * SCALE
    d = make(xoff=10_000, xon=5_000, delay_s=CABLE)
    assert d.receive(0.0, pause(1000)) is True
    assert d.next_event() == pytest.approx(CABLE)                      # the PAUSE acting is an event
    assert d.paused_mask(0.0) == 0
    lines = [f"0.0 rx {pause(1000).hex()}"] + [f"0.0 arrive {frame(ROCE_TOS).hex()}"] * 6 + ["1.0 advance"]
    want = [s + 1e-3 + CABLE for s in (0.0, 1e-3, 2e-3, 3e-3, 4e-3, CABLE + hold)]
    cfg = PfcConfig(priorities=(3,), xoff_bytes=10_000, xon_bytes=5_000)
    params = LinkParams(rate_bps=8e6, delay_s=CABLE, limit=5000, limit_unit="bytes")
    ref = trace_lines(PfcDirection(params, cfg, REAL, 2000, Dilation(SCALE), random.Random(1)), lines)
    core = run_core_trace(params, cfg, REAL, 2000, SCALE, 1, lines)
    for out in (ref, core):
        rel = [float(p[i + 1]) for p in (line.split() for line in out[:len(lines)]) for i, x in enumerate(p)
               if x == "tx"]
        assert rel == pytest.approx(want)
        pfc3 = next(line for line in out if line.startswith("pfc 3 "))
        assert "pause_received=1 " in pfc3 and float(pfc3.split("paused_s=")[1]) == pytest.approx(hold)
    d.advance(CABLE - 1e-6)
    assert d.paused_mask(CABLE - 1e-6) == 0
    d.advance(CABLE)
    assert d.paused_mask(CABLE) == 1 << 3 and d.egress.resume_at(3) == pytest.approx(CABLE + hold)


def test_pfc_frames_are_consumed_and_data_is_not():
    d = make()
    assert d.receive(0.0, frame(ROCE_TOS)) is False
    raw = pause(7)
    assert decode(raw).times == ((3, 7),) and d.receive(0.0, raw) is True


MIXED_TOS = (ROCE_TOS, ROCE_TOS, LOSSY_TOS, 0x01, 26 << 2 | 3, 48 << 2)


def _trace(n: int, seed: int, tos_choices=MIXED_TOS) -> list[str]:
    rng = random.Random(seed)
    t, lines = 1.0, []
    for i in range(n):
        t += rng.expovariate(1 / 0.0006) if i % 40 < 30 else 0.0
        tos = rng.choice(tos_choices)
        lines.append(f"{t!r} arrive {frame(tos, rng.choice((64, 500, 1000, 1500))).hex()}")
        if rng.random() < 0.04:
            lines.append(f"{t!r} rx {pause(rng.choice((0, 50, 2000, 0xFFFF))).hex()}")
        if rng.random() < 0.02:
            lines.append(f"{t + 1e-4!r} advance")
            t += 1e-4
    lines.append(f"{t + 30.0!r} advance")
    return lines


CASES = {
    "tail-bytes": dict(params=LinkParams(rate_bps=8e6, delay_s=0.002, limit=20_000, limit_unit="bytes"),
                       xoff=6000, xon=3000, headroom=4000),
    "red-ecn-packets": dict(params=LinkParams(rate_bps=10e6, delay_s=0.001, limit=30,
                                              red=RedParams(kmin=4, kmax=20, pmax=0.3, unit="packets")),
                            xoff=8000, xon=2000, headroom=3000),
    "loss-jitter": dict(params=LinkParams(rate_bps=12e6, delay_s=0.003, jitter_s=0.001, limit=40,
                                          loss=LossModel(rate=0.05)), xoff=10000, xon=7000, headroom=20000),
    "gilbert-elliott": dict(params=LinkParams(rate_bps=6e6, delay_s=0.0, limit=50_000, limit_unit="bytes",
                                              loss=LossModel(kind="gilbert-elliott", p=0.05, r=0.3, loss_bad=0.6,
                                                             loss_good=0.01)), xoff=5000, xon=1000, headroom=1500),
}


# a long cable and only priority-3 traffic: frames keep starting while a PAUSE crosses it
CASES["long-cable"] = dict(params=LinkParams(rate_bps=8e6, delay_s=0.02, limit=20_000, limit_unit="bytes"),
                           xoff=6000, xon=3000, headroom=4000, tos=(ROCE_TOS, 26 << 2 | 3))
CASES["watchdog-drop"] = dict(CASES["tail-bytes"], watchdog=WatchdogParams(detect_s=1e-4, restore_s=5e-5))
CASES["watchdog-ignore"] = dict(CASES["red-ecn-packets"],
                                watchdog=WatchdogParams(detect_s=5e-5, restore_s=1e-4, action="ignore"))


def _started_while_pause_on_cable(lines, out, params) -> int:
    """Frames that started after a PAUSE of >= 2000 quanta (41 ms, longer than the cable) was read and before
    it crossed the cable, with no other PFC frame read meanwhile: each would have been held had the PAUSE
    acted when read. Start = release - len/rate - delay (the case has no jitter)."""
    events = [(float(line.split()[0]), line.split()[1], line.split()[-1]) for line in lines]
    rx = [(t, decode(bytes.fromhex(raw))) for t, ev, raw in events if ev == "rx"]
    starts = [float(p[i + 1]) - int(p[i + 2]) * 8 / params.rate_bps - params.delay_s
              for p in (line.split() for line in out[:len(lines)]) for i, x in enumerate(p) if x == "tx"]
    n = 0
    for k, (t, f) in enumerate(rx):
        if dict(f.times).get(3, 0) >= 2000:
            until = min([t + params.delay_s] + [t2 for t2, _ in rx[k + 1:] if t2 > t])
            n += sum(t < s < until - 1e-12 for s in starts)
    return n


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_core_equals_reference(name):
    case = CASES[name]
    cfg = PfcConfig(priorities=(3, 6), xoff_bytes=case["xoff"], xon_bytes=case["xon"], quanta=4000,
                    watchdog=case.get("watchdog"))
    lines = _trace(1500, seed=len(name), tos_choices=case.get("tos", MIXED_TOS))
    ref = trace_lines(PfcDirection(case["params"], cfg, REAL, case["headroom"], Dilation(SCALE),
                                   random.Random(11)), lines)
    got = run_core_trace(case["params"], cfg, REAL, case["headroom"], SCALE, 11, lines)
    assert len(got) == len(ref)
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert a == b, f"line {i}: reference {a[:200]!r} != core {b[:200]!r}"
    text = "\n".join(ref)
    # the traces exercise what they claim to: pauses both ways, headroom or tail drops, forwarding
    assert " up " in text and "pfc" in text and " tx " in text
    pfc3 = next(line for line in ref if line.startswith("pfc 3 "))
    assert "pause_received=0 " not in pfc3 and "pause_sent=0 " not in pfc3
    if "tos" in case:
        assert _started_while_pause_on_cable(lines, ref, case["params"]) > 0
    if "watchdog" in case:     # storms were declared and ended (pauses of up to 1.3 s, detect 50-100 ms)
        wd = next(line for line in ref if line.startswith("watchdog 3 "))
        assert "storms=0 " not in wd and "restorations=0 " not in wd
        if case["watchdog"].action == "drop":
            assert "drop pfc_watchdog" in text


def test_python_line_model_routes_pfc_frames_to_the_other_direction():
    """The Python delay line's adapter: a PFC frame read on a->b's input pauses b->a (whose egress leaves by
    that interface); PAUSE/XON a->b emits leave by a->b's input, from that interface's MAC."""
    from collections import deque

    from testbed.pfc.link import LineModel, PfcPort

    port = PfcPort(PfcConfig(priorities=(3,), xoff_bytes=3000, xon_bytes=1000), REAL, 2000, SCALE)
    params = LinkParams(rate_bps=8e6, delay_s=0.0, limit=5000, limit_unit="bytes")
    sent_a, sent_b = [], []
    ab = LineModel(port.direction(params, random.Random(1)), deque(), sent_a.append, bytes.fromhex("02000000000a"),
                   lambda: 0.0)
    ba = LineModel(port.direction(params, random.Random(2)), deque(), sent_b.append, bytes.fromhex("02000000000b"),
                   lambda: 0.0)
    ab.peer, ba.peer = ba, ab
    assert ab.admit(0.0, pause(0xFFFF)) == (None, pause(0xFFFF))       # consumed: never forwarded
    assert ba.direction.egress.paused(0.0, 3) and not ab.direction.egress.paused(0.0, 3)
    ba.admit(0.0, frame(ROCE_TOS))
    assert ba.service(1.0) is not None and not ba.pending                # held by the pause
    for _ in range(4):
        ab.admit(0.0, frame(ROCE_TOS))
    assert len(ab.pending) == 1                                          # the first frame started
    assert [decode(f).times for f in sent_a] == [((3, 0xFFFF),)] and sent_a[0][6:12] == bytes.fromhex("02000000000a")
    assert PfcPort.from_json(port.to_json()) == port
    doc = ab.snapshot()
    assert doc["rx_packets"] == 4 and doc["pfc"]["pfc_tx_frames"] == 1 and doc["drop_pfc"] == 0


def test_fanin_switch_relays_pfc_to_every_sender_and_the_ledger_balances():
    from testbed.pfc.fanin import ledger, switch_argv

    argv = switch_argv("px", 3)
    relay = next(a for a in argv if "0x8808" in a)
    assert relay[relay.index("ingress") - 1] == "pxws"
    assert [relay[i + 1:i + 5] for i, x in enumerate(relay) if x == "mirred"] == [
        ["egress", "mirror", "dev", "pxw0"], ["egress", "mirror", "dev", "pxw1"], ["egress", "redirect", "dev", "pxw2"]]
    fan_in = [a for a in argv if "redirect" in a and "0x8808" not in a]
    assert {a[4] for a in fan_in} == {"pxw0", "pxw1", "pxw2"} and {a[-1] for a in fan_in} == {"pxws"}

    def node(prio, rx, fwd, **drops):
        return {"rx_kernel_drops": 0, "emulator_late": 0, "directions": {"a>b": {"tx_packets": fwd, "priorities": {
            str(prio): {"rx_packets": rx, "forwarded_packets": fwd, **drops}}}, "b>a": {}}}

    stats = {"L0": node(3, 10, 10), "L1": node(3, 12, 12), "LR": node(3, 21, 18, drop_tail=3)}
    led = ledger([{"tos": ROCE_TOS, "sent": 10}, {"tos": ROCE_TOS, "sent": 12}], stats, PfcConfig(), False, 18)
    row = led["priorities"]["3"]
    # 22 sent, 18 delivered, 3 tail drops, 1 lost between the NICs and the bottleneck (22 forwarded, 21 in)
    assert (row["sent"], row["delivered"], row["dropped"], row["lost_between"], row["unaccounted"]) == (22, 18, 3, 1, 0)
    assert not row["lossless"] and row["drops"] == {"bottleneck_drop_tail": 3}


def test_started_while_paused_reads_a_senders_capture():
    """By hand (8 Mbit/s: a 1000 B frame takes 1 ms; cable 1 ms): PAUSE stamped at 0 acts at 1 ms, XON
    stamped at 4.5 ms acts at 5.5 ms. A frame captured at c started at c - 2 ms."""
    from testbed.pfc.fanin import IncastParams, started_while_paused

    params = IncastParams(senders=1, scale=1000.0, rate_bps=8e6, delay_s=1e-3, pfc=PfcConfig(priorities=(3,)))
    ms = 1_000_000
    data = [(2.0, ROCE_TOS),    # started at 0: before the PAUSE acts                      -> 3 out
            (3.0, LOSSY_TOS),   # at 1.0: the PAUSE's first instant, inside the 0.5 ms margin -> 0 out
            (4.0, LOSSY_TOS), (5.0, LOSSY_TOS), (6.0, LOSSY_TOS),   # at 2, 3, 4 ms            -> 0 in
            (7.0, ROCE_TOS),    # at 5.0, before the XON acts: counted in (a violation, seen) -> 3 in
            (8.0, ROCE_TOS),    # at 6.0, after it                                          -> 3 out
            (9.0, LOSSY_TOS), (9.1, LOSSY_TOS),   # a catch-up burst (0.1 ms apart): skipped
            (10.5, LOSSY_TOS)]  # at 8.5                                                   -> 0 out
    records = [(0, pause(0xFFFF), 60), (int(4.5 * ms), pause(0), 60)]
    records += [(int(c * ms), frame(tos), 1000) for c, tos in data]
    got = started_while_paused(records, params)
    assert got["frames"] == {3: {"in": 1, "out": 2}, 0: {"in": 3, "out": 2}}
    assert got["skipped_burst"] == 2 and got["pfc_frames"] == 2
    assert got["paused_s"] == pytest.approx(4.5e-3)


def test_bench_pairs_each_pause_with_each_senders_reception():
    from testbed.bench.pfc import reaction_samples

    lr = {"directions": {"a>b": {"pfc_tx_events": [[1.0, 1.0002, 1], [2.0, 2.0001, 0], [3.0, 3.0003, 1]]}}}
    s0 = {"directions": {"a>b": {"pfc_rx_events": [[1.0004, 1.0005, 1], [2.0002, 2.0003, 0], [3.0004, 3.0009, 1]]}}}
    got = reaction_samples({"LR": lr, "L0": s0})
    assert got["parts"]["total"] == pytest.approx([0.0005, 0.0009])      # XONs are not reactions
    assert got["parts"]["bottleneck_lag"] == pytest.approx([0.0002, 0.0003])
    assert got["parts"]["transit"] == pytest.approx([0.0002, 0.0001])
    assert got["parts"]["sender_lag"] == pytest.approx([0.0001, 0.0005])
    assert got["senders_with_missing_frames"] == 0


@pytest.mark.parametrize("action", ["drop", "ignore"])
def test_watchdog_acts_from_the_storms_declaration_not_before(action):
    params = LinkParams(rate_bps=8e6, delay_s=0.0, limit=5000, limit_unit="bytes")
    cfg = PfcConfig(priorities=(3,), xoff_bytes=3000, xon_bytes=1000,
                    watchdog=WatchdogParams(detect_s=1e-6, restore_s=2e-6, action=action))
    d = PfcDirection(params, cfg, REAL, 2000, Dilation(SCALE), random.Random(1))
    d.receive(0.0, pause(0xFFFF))                       # held for 1.34 s; detect = 1 us real = 1 ms emulated
    d.admit(0.0, frame(ROCE_TOS))
    assert d.next_event() == pytest.approx(1e-3)
    d.advance(5e-3)
    assert d.watchdog.counters[3]["storms"] == 1
    if action == "drop":
        assert [(t, r) for t, r, _ in d.dropped] == [(pytest.approx(1e-3), "pfc_watchdog")] and not d.released
    else:
        assert [t for t, _ in d.released] == [pytest.approx(2e-3)] and not d.dropped
    d.advance(1.0)                                       # no PAUSE since 0: restored 2 ms after the declaration
    assert d.watchdog.counters[3]["restorations"] == 1
    assert d.watchdog.counters[3]["storm_s"] == pytest.approx(2e-3)


def test_a_link_nodes_two_directions_take_their_own_thresholds_in_both_cores():
    """A replica's host link: a->b is the switch's egress (xoff 3000 B), b->a the NIC (xoff 6000 B, headroom
    4000 B). Eight 1000-byte priority-3 frames at 0: a->b sends PAUSE on the fourth arrival (the first is on
    the wire: 3000 B waiting) and drops the seventh and eighth above xoff + headroom = 5000 B; b->a sends it on
    the seventh (6000 B) and drops none (limit 10000 B). Python reference and C core alike."""
    from testbed.pfc.link import PfcPort

    port = PfcPort(PfcConfig(priorities=(3,), xoff_bytes=3000, xon_bytes=1000), REAL, 2000, SCALE,
                   ba=(6000, 2000, 4000))
    assert "xoff_ba=6000.0,xon_ba=2000.0,headroom_ba=4000.0" in port.linkcore_args()[1]
    params = LinkParams(rate_bps=8e6, delay_s=0.0, limit=50_000, limit_unit="bytes")
    lines = [f"0.0 arrive {frame(ROCE_TOS).hex()}"] * 8 + ["1.0 advance"]
    outs = _both_directions(port, params, 1, lines)
    fates = {i: [line.split()[0] for line in outs[i][:8]] for i in (0, 1)}
    assert fates[0] == ["queued"] * 6 + ["pfc_headroom"] * 2 and fates[1] == ["queued"] * 8
    ups = {i: [n for n, line in enumerate(outs[i][:8]) if " up " in line] for i in (0, 1)}
    assert ups == {0: [3], 1: [6]}
    with pytest.raises(Exception, match="xon"):
        PfcPort(port.config, REAL, 2000, SCALE, ba=(1000, 2000, 4000))     # xon above xoff: refused


def _both_directions(port, params, seed: int, lines) -> dict:
    """Each direction's trace of ``lines`` (0: a->b, 1: b->a), the C core's asserted equal to the reference's."""
    from testbed.pfc.link import run_port_trace

    outs = {}
    for index in (0, 1):
        ref = trace_lines(port.direction(params, random.Random(seed), index), lines)
        core = run_port_trace(params, port, index, seed, lines)
        assert core == ref, (index, core, ref)
        outs[index] = ref
    return outs


def test_a_direction_with_red_off_never_marks_in_both_cores():
    """A replica's host link with RED on its tier: a->b is the switch's egress (marks), b->a the NIC (no AQM:
    ``red_off=ba``). Both directions are paused at 0 for 1.34 s and receive ten ECT(0) priority-3 frames:
    nothing starts, so arrival k (from 0) sees k packets queued. With kmin 2, kmax 4 packets, a->b marks CE
    every arrival from the sixth (k > kmax: probability 1); b->a, the same queue past kmax, marks none
    and drops none. Python reference and C core alike."""
    from testbed.pfc.link import PfcPort

    port = PfcPort(PfcConfig(priorities=(3,), xoff_bytes=20_000, xon_bytes=10_000), REAL, 20_000, SCALE,
                   red_off=(1,))
    assert port.linkcore_args()[1].endswith(",red_off=ba") and PfcPort.from_json(port.to_json()) == port
    params = LinkParams(rate_bps=8e6, delay_s=0.0, limit=50_000, limit_unit="bytes",
                        red=RedParams(kmin=2, kmax=4, pmax=0.5, unit="packets"))
    lines = [f"0.0 rx {pause(0xFFFF).hex()}"] + [f"0.0 arrive {frame(ROCE_TOS).hex()}"] * 10 + ["30.0 advance"]
    outs = _both_directions(port, params, 3, lines)
    fates = {i: [line.split()[0] for line in outs[i][1:11]] for i in (0, 1)}
    assert fates[0][5:] == ["ce"] * 5 and fates[1] == ["queued"] * 10
    prio3 = {i: next(line for line in outs[i] if line.startswith("prio 3 ")) for i in (0, 1)}
    assert "ce_marked=0 " not in prio3[0] and "ce_marked=0 " in prio3[1] and "drop_red=0 " in prio3[1]
    assert all("queue max_packets=10 " in outs[i][-1] for i in (0, 1))          # both queues passed kmax
    assert all("forwarded_packets=10 " in prio3[i] for i in (0, 1))            # and drained after the pause
    snap = port.direction(params, random.Random(3), 1).snapshot(0.0)
    assert snap["pfc"]["red"] is False and port.direction(params, random.Random(3), 0).snapshot(0.0)["pfc"]["red"]


def test_red_off_takes_ab_or_ba_only():
    import subprocess

    from testbed.links import core
    from testbed.pfc.link import PfcPort

    with pytest.raises(ValueError, match="red_off"):
        PfcPort(PfcConfig(priorities=(3,)), REAL, 20_000, SCALE, red_off=(2,))
    both = PfcPort(PfcConfig(priorities=(3,)), REAL, 20_000, SCALE, red_off=(1, 0, 1))
    assert both.red_off == (0, 1) and both.linkcore_args()[1].endswith(",red_off=ab,red_off=ba")
    spec = PfcPort(PfcConfig(priorities=(3,)), REAL, 20_000, SCALE).linkcore_args()[1] + ",red_off=up"
    res = subprocess.run([str(core.build()), "pfctrace", "--rate-bps", "8000000", "--pfc", spec], input="",
                         capture_output=True, text=True)
    assert res.returncode != 0 and "red_off= ab or ba" in res.stderr
