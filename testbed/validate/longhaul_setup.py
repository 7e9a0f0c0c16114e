"""The long-haul experiment's set-up, as data (pure: importable without root, unit-tested).

What ``scenarios/long_haul_cnp.py`` runs, per distance, case and mode::

    G (spec) --with_distance(km)--> --case_graph(case)--> case_plan(mode) -> plan_replica(...)
    roles(G)        senders (campus 0), receivers (campus 1), the DCI pair, the receivers' ToR
    case_rates      sender-dci: the long haul at one sender's line rate (N:1 for N senders, --incast);
                    receiver-tor: the receivers' ports at half the line rate, the long haul not the bottleneck
    bottleneck      the congestion point (switch, neighbour)
    overrides       RoCE frames, the RED rule (per-25G or BDP-relative), the long haul's backend, the CNP interval
    pair_qpns / qp_map_entries / sender_config   the senders' and the switches' QP configuration
    row / validate_fields                        one result row and the config block validate reads
    timeline                                     a trial over time: DCQCN rates, queue, CNP arrivals

Real-world units everywhere except where a name says ``emulated``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.errors import SpecError
from testbed.plan import Overrides, plan_replica
from testbed.plan.replica import CNP_INTERVAL_S
from testbed.rdma.qp import LINE_BURST_FRAMES
from testbed.roce.sample import DATA_SAMPLE_FRAMES, ROCE_FILTER
from testbed.topo.builder import set_link

DISTANCES_KM = (0, 10, 30, 50, 100)
QUICK_DISTANCES_KM = (30,)
MODES = ("ecn", "fast-cnp")
CASES = ("sender-dci", "receiver-tor")
#: ``--incast N``: N sender-receiver pairs; N:1 at the sender-side DCI (the only case it applies to: each
#: receiver has its own port at its ToR, so the receiver-tor case stays 2 pairs, each 2:1 by rate).
DEFAULT_INCAST, MIN_INCAST, MAX_INCAST = 2, 2, 8
INCAST_CASES = ("sender-dci",)
#: soft-RDMA IB path MTU; frames are Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + payload + ICRC 4.
IB_MTU = 1024
FRAME_BYTES = 14 + 20 + 8 + 12 + IB_MTU + 4
#: RED thresholds (testbed.plan.marking): per 25G of port rate (Alibaba's production rule, the default) or
#: relative to the path's bandwidth-delay product (Juniper's long-haul profile); Pmax 20 % in both.
RED_RULES, PMAX = ("per-25g", "bdp"), 0.2
#: Real-world sampling interval of a trial's timeline (senders' DCQCN rate, the congestion point's queue):
#: 50 us, a sixth of the 30 km round trip; x scale emulated (50 ms at 1000: 40 Thrift reads a second). At
#: 30 km the bottleneck switch's CPU was 17-34 % with a sampler (every 25 us) and 16-34 % in the sweep without.
TIMELINE_EVERY_S = 50e-6


@dataclass(frozen=True)
class Roles:
    senders: tuple
    receivers: tuple
    dci: tuple          # (sender side, receiver side)
    receiver_tor: str


def roles(G) -> Roles:
    """Senders = hosts of campus 0, receivers = hosts of campus 1, paired in order (from attributes)."""
    hosts = [n for n, d in G.nodes(data=True) if d.get("role") == "host"]
    senders = tuple(h for h in hosts if G.nodes[h].get("campus") == 0)
    receivers = tuple(h for h in hosts if G.nodes[h].get("campus") == 1)
    dci = {G.nodes[n]["campus"]: n for n, d in G.nodes(data=True) if d.get("role") == "dci"}
    if not senders or len(senders) != len(receivers) or set(dci) != {0, 1}:
        raise SpecError("params.campuses", "long_haul_cnp needs two campuses with the same number of hosts "
                                           "and one DCI switch each")
    tors = {nbr for r in receivers for nbr in G.neighbors(r)}
    if len(tors) != 1:
        raise SpecError("params.campuses", f"receivers must share one ToR, found {sorted(tors)}")
    return Roles(senders, receivers, (dci[0], dci[1]), tors.pop())


def with_distance(G, distance_km: float):
    """Copy of G whose long-haul (dci-tier) link is ``distance_km`` long (5 us/km one way)."""
    H = G.copy()
    for u, v, d in H.edges(data=True):
        if d.get("tier") == "dci":
            set_link(H, u, v, distance_m=distance_km * 1e3)
    return H


def case_rates(G, case: str, r: Roles) -> dict:
    """Real-world rate of each edge (frozenset) for a case: the spec's, with the case's bottleneck."""
    rates = {frozenset((u, v)): d["rate_bps"] for u, v, d in G.edges(data=True)}
    host_rate = max(G.edges[s, next(iter(G.neighbors(s)))]["rate_bps"] for s in r.senders)
    if case == "sender-dci":
        rates[frozenset(r.dci)] = host_rate    # N:1 onto the long haul: N senders at line rate into one port
        for u, v in G.edges(r.dci[0]):         # and nothing before it narrower than the senders' sum
            if G.nodes[v].get("role") != "dci":
                rates[frozenset((u, v))] = max(rates[frozenset((u, v))], host_rate * len(r.senders))
    elif case == "receiver-tor":
        rates[frozenset(r.dci)] = host_rate * len(r.senders) * 2   # long haul not the bottleneck
        for h in r.receivers:
            rates[frozenset((r.receiver_tor, h))] = host_rate / 2  # receiver ports at half the line rate
    else:
        raise SpecError("case", f"{case!r} is not one of: {', '.join(CASES)}")
    return rates


def bottleneck(case: str, r: Roles) -> tuple:
    """(switch, neighbour) whose egress queue is the congestion point (first receiver's for the ToR)."""
    return (r.dci[0], r.dci[1]) if case == "sender-dci" else (r.receiver_tor, r.receivers[0])


def crossing(case: str, r: Roles) -> tuple:
    """The senders whose flows cross the congestion point's port (both at the DCI, the first at the ToR)."""
    return r.senders if case == "sender-dci" else r.senders[:1]


def case_graph(G, case: str):
    """Copy of G with the case's real-world link rates (:func:`case_rates`)."""
    H = G.copy()
    for edge, rate in case_rates(G, case, roles(G)).items():
        u, v = tuple(edge)
        set_link(H, u, v, rate_bps=rate)
    return H


def overrides(mode: str = "ecn", link_backend: str = "auto", red: str = "per-25g",
              rtt_s: float | None = None, serialise: bool = True) -> Overrides:
    """The run's choices on top of the spec: RoCE frames, the RED rule, the CNP interval, and the long
    haul's backend: ``auto`` lets the plan choose from the capabilities (tc netem where ``doctor`` finds it,
    the userspace link node otherwise; the plan's link entry says which and why), ``netem`` or
    ``userspace`` force one (``--link-backend``). ``red``: ``per-25g`` (Alibaba's rule) or ``bdp``
    (Juniper's, relative to the round trip ``rtt_s``: :func:`path_rtt_s`). Every link serialises each frame
    (``Overrides.serialise``): the feedback loops here are microseconds at 0-10 km, and a replica that hands
    frames over one serialisation early at every hop came in under the physics bound (``serialise`` False:
    as before, for comparison: ``--no-serialise``)."""
    if red not in RED_RULES:
        raise SpecError("--red", f"{red!r} is not one of: {', '.join(RED_RULES)}")
    return Overrides(link_backend=link_backend, frame_bytes=FRAME_BYTES, ecn_mode=mode,
                     cnp_interval_s=CNP_INTERVAL_S, red_profile=(red, rtt_s or 0.0, PMAX), serialise=serialise)


def red_rule(G, red: str) -> dict:
    """The RED rule of a run, as config.json and the console say it: the profile at the senders' line
    rate over the path's round trip (each port applies it at its own rate)."""
    from testbed.plan.marking import marking_profile

    r = roles(G)
    rate = G.edges[r.senders[0], next(iter(G.neighbors(r.senders[0])))]["rate_bps"]
    rtt = path_rtt_s(G, r.senders[0], r.receivers[0])
    return {"rule": red, "rtt_s": rtt, "at_rate_bps": rate,
            **marking_profile(red, rate, rtt, FRAME_BYTES, PMAX).to_json()}


def describe_red(rule: dict) -> str:
    """One line for the console: the RED rule of :func:`red_rule`."""
    what = "per 25G of port rate" if rule["rule"] == "per-25g" else \
        f"0.75 / 1.5 BDP over the {rule['rtt_s'] * 1e6:.0f} us round trip"
    return (f"RED {rule['rule']} ({what}): at {rule['at_rate_bps'] / 1e9:g}G Kmin {rule['kmin_pkts']}, "
            f"Kmax {rule['kmax_pkts']} frames, Pmax {rule['pmax']:g}")


def case_plan(G, case: str, mode: str, capabilities=None, link_backend: str = "auto", red: str = "per-25g",
              serialise: bool = True):
    """The replica plan of one case and mode: BMv2 queue rates/depths, RED and fast-CNP per port."""
    from testbed.plan import ASSUMED

    r = roles(G)
    rtt = path_rtt_s(G, r.senders[0], r.receivers[0])
    return plan_replica(case_graph(G, case), capabilities or ASSUMED, overrides(mode, link_backend, red, rtt, serialise))


def long_haul_backend(plan, r: Roles) -> tuple[str, str]:
    """(backend, reason) of the long haul in ``plan``: what plan.json says the run used and why."""
    u, v = r.dci
    entry = next(e for e in plan.links if {e.u, e.v} == {u, v})
    return entry.backend, entry.reason


def row(case: str, distance_km: float, mode: str, scale: float, t: dict, repetition: int = 0) -> dict:
    """One result row: real-world units, the emulated figures beside them, and the trial's verdict
    (the fields ``testbed validate --long-haul`` reads, docs/validation.md)."""
    def real_ms(x):
        return None if x is None else round(x / scale * 1e3, 4)

    return {"case": case, "distance_km": distance_km, "mode": mode, "repetition": repetition,
            "valid": t["validity"]["valid"], "validity": t["validity"], "health": t["health"],
            "emulator_ok": t["emulator_ok"], "unaccounted_losses": t["unaccounted_losses"],
            "emulator": t["emulator"], "cpu": t["cpu"],   # the evidence of the run's health block
            "long_haul_backend": t.get("long_haul_backend"), "long_haul_netem_drops": t.get("long_haul_netem_drops"),
            "accounting": t["accounting"], "bottleneck": t["bottleneck"], "cnps_rx": t["cnps_rx"],
            "feedback_check": t.get("feedback_check"), "data_check": t.get("data_check"),
            "throughput_mbps": round(t["goodput_bps"] * scale / 1e6, 1),
            "fct_p50_ms": real_ms(t["fct_p50_s"]), "fct_p99_ms": real_ms(t["fct_p99_s"]),
            "fct_by_size": [{"bytes": c["bytes"], "messages": c["messages"], "fct_p50_ms": real_ms(c["fct_p50_s"]),
                             "fct_p99_ms": real_ms(c["fct_p99_s"])} for c in t.get("fct_by_size", ())],
            "queue_peak_pkts": t["queue_peak"], "queue_mean_pkts": t["queue_mean"],
            "feedback_delay_ms": real_ms(t["feedback_delay_s"]), "drops": t["drops"],
            "marks": t["marks"], "switch_cnps": t["switch_cnps"], "cnps_at_senders": t["cnps_rx"],
            "retransmissions": t["retransmissions"], "window_pkts": t.get("window_pkts"), "emulator_saturated": bool(t["saturation"]),
            "start_offsets_us": start_offsets_us(t.get("senders") or (), scale),
            "saturation": t["saturation"],
            "emulated": {"throughput_mbps": round(t["goodput_bps"] / 1e6, 3), "fct_p50_ms": _ms(t["fct_p50_s"]),
                         "fct_p99_ms": _ms(t["fct_p99_s"]), "feedback_delay_ms": _ms(t["feedback_delay_s"])}}


def start_offsets_us(results, scale: float) -> list | None:
    """Each sender's start after the first's, real us, in sender order (``started_at`` on the wall clock).

    Why: at long distances the models' goodput jumps with a few us of start phase (which messages of a mix
    overlap at line rate decides whether an early congestion episode happens), so ``testbed validate`` runs
    them with the phases the trial had, not a simultaneous start."""
    starts = [r.get("started_at") for r in results]
    if not starts or any(s is None for s in starts):
        return None
    t0 = min(starts)
    return [round((s - t0) / scale * 1e6, 3) for s in starts]


def timeline(senders, results: list, queue: list, cnp_times: dict, scale: float,
             drain_pps: float | None = None) -> dict:
    """A trial over time in real-world units (pure): each sender's DCQCN rate, the congestion point's queue
    (the depth its latest packet met), each sender's CNP arrivals; time in real ms from the first start.

    ``results``: the senders' result documents in the order of ``senders`` (their ``series``: seconds since
    their own start, ``started_at`` on the wall clock); ``queue``: :func:`testbed.p4rt.fabric_stats.queue_series`
    (wall clock); ``cnp_times``: {sender: wall-clock capture times}. Emulated rates x scale, times / scale.

    ``drain_pps``: the port's drain rate (emulated packets per second). fabric.p4 writes a packet's enqueue
    depth when it *leaves* the queue, so a reading of depth q describes the queue q / drain_pps earlier;
    each point is moved back by that (without it the curve lags by the queueing delay, and while two senders
    fill the queue at twice its rate it rises at half the true slope: a 30 km trial's 509-frame peak was
    drawn at 0.98 ms instead of 0.54).
    """
    t0 = min(r["started_at"] for r in results)

    def ms(wall: float) -> float:
        return round((wall - t0) / scale * 1e3, 4)

    rates = {}
    for s, r in zip(senders, results, strict=True):
        cols = (r.get("series") or {}).get("columns", [])
        rows = (r.get("series") or {}).get("rows", [])
        i_t, i_rate = (cols.index("t"), cols.index("rate_bps")) if rows else (0, 0)
        rates[s] = {"t_ms": [ms(r["started_at"] + row[i_t]) for row in rows],
                    "rate_gbps": [None if row[i_rate] is None else row[i_rate] * scale / 1e9 for row in rows]}
    return {"scale": scale, "rate": rates,
            "queue": {"t_ms": [ms(t - (q / drain_pps if drain_pps and q else 0.0)) for t, q in queue],
                      "pkts": [q for _, q in queue]},
            "cnps": {s: [ms(t) for t in ts if t >= t0] for s, ts in cnp_times.items()}}


def validate_fields(G, long_haul: str = "userspace") -> dict:
    """Config fields ``testbed validate --long-haul`` reads: the senders' real line rate, how many share the
    bottleneck, one campus' cabling (host + campus-DCI link) and the backends (``long_haul``: the long
    haul's, from :func:`long_haul_backend`)."""
    r = roles(G)
    s = r.senders[0]
    tor = next(iter(G.neighbors(s)))
    up = next(n for n in G.neighbors(tor) if G.nodes[n].get("role") == "dci")
    return {"line_rate_bps": G.edges[s, tor]["rate_bps"], "flows": len(r.senders),
            "local_fibre_m": G.edges[s, tor].get("distance_m", 0.0) + G.edges[tor, up].get("distance_m", 0.0),
            "backends": ["bmv2", long_haul, "soft-rdma"]}


def _ms(x):
    return None if x is None else round(x * 1e3, 2)


def pair_qpns(i: int) -> tuple[int, int]:
    """(sender's, receiver's) QP number of sender-receiver pair ``i``: fixed, so the QP maps can be preloaded."""
    return 0x100 + i, 0x200 + i


def qp_map_entries(plan, r: Roles) -> list:
    """The control plane's QP map: (sender ip, receiver ip, receiver QP) -> sender QP for every pair."""
    from testbed.p4rt import entries as E

    return [E.qp_map_entry(plan.endpoint(s).ip, plan.endpoint(d).ip, pair_qpns(i)[1], pair_qpns(i)[0])
            for i, (s, d) in enumerate(zip(r.senders, r.receivers, strict=True))]


#: The senders' window is never below this many BDPs of their path (issue 13: NIC-like senders, so that
#: DCQCN, not the window, limits them), nor below the endpoint's own default.
WINDOW_BDPS, MIN_WINDOW_PKTS = 2.0, 128


def path_rtt_s(G, sender, receiver) -> float:
    """Real-world round-trip propagation of the sender-receiver path (both ways over every link on it)."""
    import networkx as nx

    path = nx.shortest_path(G, sender, receiver)
    return 2 * sum(G.edges[u, v]["delay_s"] for u, v in zip(path, path[1:], strict=False))


def bdp_pkts(G, sender, receiver) -> float:
    """Bandwidth-delay product of the path in frames, at the sender's line rate (real-world units)."""
    rate = G.edges[sender, next(iter(G.neighbors(sender)))]["rate_bps"]
    return rate * path_rtt_s(G, sender, receiver) / 8 / FRAME_BYTES


def default_window(G, r: Roles) -> int:
    """Packets in flight per QP: :data:`WINDOW_BDPS` x the longest pair's BDP, at least
    :data:`MIN_WINDOW_PKTS` (30 km at 10G: BDP ~350 frames, window ~700)."""
    return max(MIN_WINDOW_PKTS, int(-(-WINDOW_BDPS * worst_bdp_pkts(G, r) // 1)))


def worst_bdp_pkts(G, r: Roles) -> float:
    """The largest sender-receiver pair's :func:`bdp_pkts`: what the window and the console are sized by."""
    return max(bdp_pkts(G, s, d) for s, d in zip(r.senders, r.receivers, strict=True))


def sender_config(plan, sender, receiver, args, window: int, qpns=None, index: int = 0) -> dict:
    """The send document of one sender (:mod:`testbed.rdma.endpoint`): the plan's emulated DCQCN and timeout,
    ``window`` packets in flight (:func:`default_window` unless ``--window``), and (preloaded QP maps) the
    pair's QP numbers. With a flow-size mix (``args.sizes``, more than one) the sender cycles through it
    starting at its ``index``-th size, so at any moment the senders' messages differ in size, as a mix's do."""
    ep = plan.endpoint(sender)
    doc = {"host": plan.endpoint(receiver).ip, "test": "write_lat", "size": args.size, "iters": args.iters,
           "mtu": IB_MTU, "window": window, "timeout_s": ep.emulated_qp_timeout_s, "dcqcn": ep.emulated_dcqcn,
           "series_every_s": TIMELINE_EVERY_S * plan.scale,
           "line_burst_frames": LINE_BURST_FRAMES,   # a NIC's pacer: no standing queue behind it (QpConfig)
           "run_timeout_s": getattr(args, "trial_timeout", None)}   # the sender gives up when the trial does
    sizes = list(getattr(args, "sizes", None) or [args.size])
    if len(sizes) > 1:
        doc["sizes"] = message_sizes(sizes, len(sizes), index)
    if qpns is not None:
        doc["qpns"] = list(qpns)
    return doc


def message_sizes(sizes: list[int], messages: int, index: int) -> list[int]:
    """The sizes of the ``messages`` messages sender ``index`` posts (pure; as :func:`sender_config` rotates
    the mix and :mod:`testbed.rdma.perf` cycles through it): the flows the validate model is given."""
    k = index % len(sizes)
    cycle = sizes[k:] + sizes[:k]
    return [cycle[n % len(cycle)] for n in range(messages)]


def checked_args(args) -> tuple[list, list, list]:
    """Check and complete the scenario's parsed options in place (``--size`` to bytes, the ``--quick``
    defaults of ``--iters`` and ``--repetitions``); returns (distances km, modes, cases). A bad value is a
    :class:`SpecError` naming the option."""
    from testbed.units import parse_size

    args.sizes = [int(parse_size(x, "--size")) for x in parse_list(str(args.size), "--size", str)]
    if min(args.sizes) < 1:
        raise SpecError("--size", f"each size must be at least 1 byte, such as 64KB or 1MB; got {args.size}")
    if len(set(args.sizes)) != len(args.sizes):
        raise SpecError("--size", f"a size mix lists each size once, got {args.size}")
    args.size = max(args.sizes)
    mix = len(args.sizes)
    if args.iters is None:  # 0 and negatives are refused by the parser (exit 2); a mix: every size as often
        args.iters = -(-(2 if args.quick else 8) // mix) * mix
    if args.iters % mix:
        raise SpecError("--iters", f"must be a multiple of the {mix} sizes of --size (each sent as often), "
                                   f"got {args.iters}")
    if args.repetitions is None:
        args.repetitions = 1 if args.quick else 5
    if not 1 <= args.repetitions <= 100:
        raise SpecError("--repetitions", f"must be 1..100, got {args.repetitions}")
    if args.window is not None and not 1 <= args.window <= 1 << 20:
        raise SpecError("--window", f"must be 1..{1 << 20} packets, got {args.window}")
    default = QUICK_DISTANCES_KM if args.quick else DISTANCES_KM
    distances = parse_list(args.distances or ",".join(map(str, default)), "--distances", float)
    if any(d < 0 or d > 2000 for d in distances):
        raise SpecError("--distances", f"each distance must be 0..2000 km, got {args.distances!r}")
    incast = getattr(args, "incast", DEFAULT_INCAST)
    if not MIN_INCAST <= incast <= MAX_INCAST:
        raise SpecError("--incast", f"must be {MIN_INCAST}..{MAX_INCAST} senders, got {incast}")
    cases = parse_list(args.cases or ",".join(CASES if incast == DEFAULT_INCAST else INCAST_CASES), "--cases",
                       str, CASES)
    if incast != DEFAULT_INCAST and set(cases) - set(INCAST_CASES):
        raise SpecError("--incast", f"{incast}:1 is built at the sender-side DCI (N senders into one port); at "
                                    "the receiver's ToR each receiver has its own port, so use --cases sender-dci")
    return distances, parse_list(args.modes, "--modes", str, MODES), cases


def parse_list(text: str, field: str, cast, allowed=None) -> list:
    """A comma-separated CLI list; a bad item is a :class:`SpecError` naming ``field``."""
    try:
        items = [cast(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError(field, f"expected a comma-separated list, got {text!r}") from None
    if not items:
        raise SpecError(field, "must not be empty")
    if allowed is not None:
        bad = [x for x in items if x not in allowed]
        if bad:
            raise SpecError(field, f"{bad[0]!r} is not one of: {', '.join(allowed)}")
    return items


#: tcpdump filters: a CNP (BTH opcode 0x81), a RoCEv2 frame marked CE (the IP header's ECN bits 11), and
#: any RoCEv2 frame (:data:`ROCE_FILTER`, from testbed.roce.sample); a trial's data sample (``data-<sender>``)
#: holds :data:`DATA_SAMPLE_FRAMES` whole frames, about 1.4 of the 1 MB messages a sender writes (1024 data
#: frames each, an ACK every 32 PSNs).
CNP_FILTER, CE_FILTER = "udp dst port 4791 and udp[8] = 0x81", "udp dst port 4791 and ip[1] & 3 = 3"


def captures(G, case: str, r: Roles) -> list[tuple]:
    """Where a trial captures, as ``(node, neighbour, direction, filter, name, count)``: the CNPs reaching each
    sender (``cnp-<sender>``), and at the congestion point, on the wire, its first signal: the CE-marked frames
    it sends on towards the receiver (``signal-ce``) and the CNPs it sends back towards the senders
    (``signal-cnp``: its own, with fast CNP); at each receiver the CE-marked frames in and its CNPs out
    (``receiver-<h>``: the notification point's turn-around). Every capture is stamped by the one kernel
    clock, so the feedback delay between them needs no join of the switch's clock with the machine's.
    ``count`` None: until the trial ends; the one bounded capture is the first sender's data sample
    (``data-<sender>``: its first :data:`DATA_SAMPLE_FRAMES` RoCEv2 frames in both directions at its host
    link, for ``roce check --expect-ect``: :func:`testbed.validate.longhaul_captures.data_check`)."""
    bsw, bnbr = bottleneck(case, r)
    import networkx as nx

    back = nx.shortest_path(G, bsw, r.senders[0])[1]
    s0 = r.senders[0]
    return ([(s, next(iter(G.neighbors(s))), "in", CNP_FILTER, f"cnp-{s}", None) for s in r.senders]
            + [(bsw, bnbr, "out", CE_FILTER, "signal-ce", None), (bsw, back, "out", CNP_FILTER, "signal-cnp", None)]
            + [(h, next(iter(G.neighbors(h))), None, f"({CE_FILTER}) or ({CNP_FILTER})", f"receiver-{h}", None)
               for h in r.receivers]
            + [(s0, next(iter(G.neighbors(s0))), None, ROCE_FILTER, f"data-{s0}", DATA_SAMPLE_FRAMES)])


def feedback_on_wire(mode: str, signal_ce: list, signal_cnp: list, cnp_times: list) -> float | None:
    """Seconds from the congestion point's first signal on the wire (its first CE-marked frame out with
    ECN, its first CNP out with fast CNP) to the first CNP captured at a sender after it; None when either
    is missing. All times from the kernel's capture clock (:func:`captures`)."""
    first = min(signal_cnp if mode == "fast-cnp" else signal_ce, default=None)
    answer = _first_after(first, cnp_times)
    return None if answer is None else answer - first


def _first_after(t0: float | None, times) -> float | None:
    """The earliest of ``times`` at or after ``t0`` (None when ``t0`` is None or none is)."""
    return None if t0 is None else min((t for t in times if t >= t0), default=None)


def feedback_parts(signal_ce: list, receivers: dict, sender_cnp: list) -> dict | None:
    """ECN's feedback split where it was captured (seconds; pure): the first CE-marked frame from the
    congestion point to the receiver it reached first (``to_receiver_s``: fibre, switches), that receiver's
    first CNP after it (``receiver_turnaround_s``: the notification point), and from there to the first
    CNP at a sender (``to_sender_s``). ``receivers``: {receiver: (CE-marked frames in, CNPs out)}. None when
    a part is missing (fast CNP: nothing is marked)."""
    t0 = min(signal_ce, default=None)
    first = min(((t, h) for h, (ce, _) in receivers.items() for t in ce if t0 is not None and t >= t0), default=None)
    if first is None:
        return None
    tr, h = first
    tc = _first_after(tr, receivers[h][1])
    ts = _first_after(tc, sender_cnp)
    if ts is None:
        return None
    return {"receiver": h, "to_receiver_s": tr - t0, "receiver_turnaround_s": tc - tr, "to_sender_s": ts - tc}


def feedback_delay(clock_epoch_us: float, first_signal_us: int, cnp_times: list) -> float | None:
    """Seconds from the congestion point's first signal (switch clock + its wall-clock epoch) to the first
    CNP captured at a sender after it; None when either is missing."""
    if not first_signal_us or not cnp_times:
        return None
    signal = (clock_epoch_us + first_signal_us) * 1e-6
    answer = _first_after(signal, cnp_times)
    return None if answer is None else answer - signal


def _port(plan, switch, neighbour):
    """The plan's entry of ``switch``'s port towards ``neighbour``."""
    return plan.switch(switch).port(plan.graph.edges[switch, neighbour]["ports"][switch])


def bottleneck_doc(plan, switch, neighbour, flows: int) -> dict:
    """The congestion point's configuration, emulated and real, and how many ``flows`` cross it (the fields
    validate's gain rows read: the fluid model is run on those flows)."""
    port = _port(plan, switch, neighbour)
    return {"switch": switch, "port": port.port, "rate_pps": port.emulated_rate_pps,
            "kmin_pkts": port.ecn.kmin_pkts, "kmax_pkts": port.ecn.kmax_pkts,
            "real_rate_bps": plan.graph.edges[switch, neighbour]["rate_bps"],
            "kmin_bytes": port.ecn.kmin_pkts * FRAME_BYTES, "kmax_bytes": port.ecn.kmax_pkts * FRAME_BYTES,
            "pmax": port.ecn.pmax, "flows": flows}


def drain_s(plan, switch, neighbour) -> float:
    """Seconds the congestion point's queue, full, takes to drain at its emulated rate (0 when the port has
    no BMv2 rate): how long after the senders are done frames may still be leaving it."""
    port = _port(plan, switch, neighbour)
    return port.depth_pkts / port.emulated_rate_pps if port.emulated_rate_pps else 0.0


def feedback_check(plan, case: str, r: Roles, mode: str, feedback_s: float | None, bottleneck: dict) -> dict | None:
    """:func:`testbed.validate.trials.feedback_check` of one trial from its plan (``feedback_s``: emulated
    seconds, as measured): the same figures ``testbed validate`` recomputes from the row and config.json."""
    from testbed.validate.trials import feedback_check as check

    G = plan.graph
    real = None if feedback_s is None else feedback_s / plan.scale
    return check(case, G.edges[r.dci].get("distance_m", 0.0), mode, real, validate_fields(G)["local_fibre_m"],
                 bottleneck["real_rate_bps"], FRAME_BYTES)


def run_config(G, spec, args, distances, modes, cases, long_haul: str = "userspace") -> dict:
    """The run's ``config`` block (config.json): what was asked and the fields ``testbed validate`` reads."""
    return {"spec": str(spec), "distances_km": distances, "modes": modes, "cases": cases,
            "message_bytes": args.size, "messages_per_sender": args.iters,
            "message_sizes": list(getattr(args, "sizes", None) or [args.size]),
            "window_pkts": args.window or f"{WINDOW_BDPS:g} x BDP per distance, at least {MIN_WINDOW_PKTS}",
            "repetitions": args.repetitions, "scale": G.graph["scale"], "ib_mtu": IB_MTU,
            "frame_bytes": FRAME_BYTES, "cnp_interval_s": CNP_INTERVAL_S,
            "red": red_rule(G, getattr(args, "red", "per-25g")),
            "qp_map": "learned from ACKs" if args.learn_qp else "preloaded by the control plane",
            "link_backend": getattr(args, "link_backend", "auto"), "incast": getattr(args, "incast", DEFAULT_INCAST),
            "serialise": not getattr(args, "no_serialise", False),
            **validate_fields(G, long_haul)}


def capture_lags(plan, case: str, r: Roles) -> dict:
    """{capture name: :func:`netem_lag_s` of its port} for every capture of :func:`captures` (a CNP
    capture's frames are CNPs, every other's full frames: what netem's rate serialises)."""
    from testbed.validate.trials import CNP_FRAME_BYTES

    return {name: netem_lag_s(plan, node, nbr, CNP_FRAME_BYTES if "cnp" in name else plan.frame_bytes)
            for node, nbr, _way, _expr, name, _n in captures(plan.graph, case, r)}


def graph(spec_path, scale: float | None = None, pairs: int | None = None):
    """The long-haul spec's graph, at ``scale`` instead of the spec's own when given (``--scale``), with
    ``pairs`` hosts in each campus instead of the spec's (``--incast``: N senders, N receivers). The changed
    spec is validated again like any other."""
    from dataclasses import replace

    import yaml

    from testbed.topo.spec import build_graph, load_spec, parse_spec

    spec = load_spec(spec_path)
    if pairs is not None:
        doc = yaml.safe_load(Path(spec_path).read_text())
        for campus in doc["params"]["campuses"]:
            campus.setdefault("params", {})["hosts"] = pairs
        spec = parse_spec(doc, f"{spec_path} with --incast {pairs}")
    return build_graph(spec if scale is None else replace(spec, scale=scale))


def netem_lag_s(plan, node, neighbour, frame_bytes: int = 0) -> float:
    """Seconds to take out of a capture's timestamps on ``node``'s port towards ``neighbour``: a port whose
    egress carries tc netem hands a frame to the capture tap only after netem's delay (the tap sits behind
    the qdisc), so a frame "leaving" the switch there is stamped one long-haul crossing late (measured in the
    VM: ECN's feedback 0.155 ms real on the wire against 0.305 by the switch's clock). With netem's ``rate``
    (store and forward, ``Overrides.serialise``) also after the frame's own serialisation, ``frame_bytes``
    at that rate: the tap of a link node's port stamps a frame as BMv2 hands it over. 0 without netem."""
    e = next(e for e in plan.links if {e.u, e.v} == {node, neighbour})
    netem = next((argv for argv in dict(e.tc).get(node, ()) if "netem" in argv), None)
    if netem is None:
        return 0.0
    if "rate" not in netem:
        return e.applied.delay_s
    rate = netem[netem.index("rate") + 1]
    return e.applied.delay_s + frame_bytes * 8 / float(rate.removesuffix("bit"))
