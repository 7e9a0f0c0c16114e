"""What ``testbed collective run`` and ``scenarios/collective.py`` measure: options checked once (pure),
jobs placed on the fabric (pure), then the runs on a replica, an nccl-tests table, JSON and a plot.

    Options.from_args(args)        every bad value -> SpecError naming the flag (one line, exit 2)
      -> fabric_graph(name) -> jobs(G, opts) (placement per job, disjoint hosts)
      -> CollectiveFabric(G, link_rate) .run(jobs)   (root)
      -> rows + JCT + links + health -> results/collective/<stamp>/{metrics.json, busbw.png (figure.py)}

Fabrics: ``small`` (2 leaves x 2 hosts under one spine: a tree, no controller), ``fat-tree-k4`` (the shipped
spec; the os-ken controller spreads flows with ECMP), ``rail-small`` (rail-optimized, 2 servers x 2 GPUs,
one spine). Every link is 100G in the real fabric; ``--link-rate`` is the emulated host-link rate and
fixes the time dilation (scale = 100G / link rate).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.collective import placement as P
from testbed.collective import schedule as S
from testbed.errors import SpecError
from testbed.units import parse_rate, parse_size

FABRICS = ("small", "fat-tree-k4", "rail-small")
#: what the soft-RDMA ranks plus OVS sustain on 2 shared cores with headroom (see docs/collectives.md)
DEFAULT_LINK_RATE = "10M"


def fabric_graph(name: str):
    from testbed.topo import generators

    if name == "small":
        return generators.spine_leaf(2, 1, 2)
    if name == "rail-small":
        return generators.rail_optimized(2, 2, 1)
    if name == "fat-tree-k4":
        from testbed.scenario import REPO_ROOT
        from testbed.topo.spec import build_graph, load_spec

        return build_graph(load_spec(REPO_ROOT / "scenarios" / "specs" / "fat-tree-k4.yaml"))
    raise SpecError("--fabric", f"unknown fabric {name!r}; allowed: {', '.join(FABRICS)}")


@dataclass(frozen=True)
class Options:
    fabric: str = "small"
    collective: str = "allreduce"
    algorithm: str | None = None
    ranks: int = 4
    sizes: tuple = (65536, 262144, 1048576)
    placement: tuple = ("packed",)
    jobs: int = 1
    pods: bool = False
    chunks: int = 4
    iters: int = 2
    warmup: int = 1
    skew: float = 1.0
    root: int = 0
    link_rate_bps: float = 10e6
    trace: dict | None = None
    timeout_s: float = 600.0
    failures: tuple = ()          # testbed.failures.Event, sorted
    nic_rates: tuple = ()         # (rank, real NIC rate in bit/s): ranks slower than the fabric's host links
    ovs_send_buffer: int | None = None   # bytes: ovs-vswitchd's send buffer for the run (testbed.emu.ovssndbuf)
    alone: bool = False           # each job alone first, then together: slowdowns and jobs.png (jobsfig)

    @classmethod
    def from_args(cls, a) -> "Options":
        from testbed.collective import innetwork as IN

        if a.fabric not in FABRICS and a.fabric not in IN.FABRICS:
            raise SpecError("--fabric", f"unknown fabric {a.fabric!r}; allowed: {', '.join((*FABRICS, *IN.FABRICS))}")
        if a.collective not in S.COLLECTIVES:
            raise SpecError("--collective", f"unknown collective {a.collective!r}; allowed: {', '.join(S.COLLECTIVES)}")
        innetwork = IN.refuse(a.fabric, a.collective, a.algorithm, FABRICS)
        if not innetwork and a.algorithm is not None and a.algorithm not in S.ALGORITHMS[a.collective]:
            raise SpecError("--algorithm", f"{a.collective} runs as {', '.join(algorithms(a.collective))}, "
                                           f"not {a.algorithm!r}")
        for flag, value, low in (("--ranks", a.ranks, 2), ("--jobs", a.jobs, 1), ("--chunks", a.chunks, 1),
                                 ("--iters", a.iters, 1), ("--warmup", a.warmup, 0), ("--root", a.root, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise SpecError(flag, f"must be an integer >= {low}, got {value!r}")
        if a.chunks > S.MAX_CHUNKS:
            raise SpecError("--chunks", f"must be an integer in 1..{S.MAX_CHUNKS}, got {a.chunks}")
        if a.root >= a.ranks:
            raise SpecError("--root", f"must be a rank 0..{a.ranks - 1}, got {a.root}")
        if innetwork:
            IN.check_options(a)
        else:
            check_job_count(a.fabric, a.jobs)
        sizes = []
        for text in str(a.sizes).split(","):
            size = int(parse_size(text.strip(), "--sizes"))
            if size % S.ELEMENT_BYTES or size < S.ELEMENT_BYTES * a.ranks:
                raise SpecError("--sizes", f"{text.strip()} must be a multiple of 4 bytes (int32) and hold one "
                                           f"element per rank (>= {4 * a.ranks} B)")
            sizes.append(size)
        places = tuple(p.strip() for p in str(a.placement).split(","))
        for p in places:
            if p not in P.POLICIES:
                raise SpecError("--placement", f"unknown policy {p!r}; allowed: {', '.join(P.POLICIES)}")
        if len(places) not in (1, a.jobs):
            raise SpecError("--placement", f"give one policy or one per job ({a.jobs}), got {len(places)}")
        if not a.skew >= 1 or a.skew != a.skew or a.skew == float("inf"):
            raise SpecError("--skew", f"must be a finite number >= 1 (1: uniform all-to-all), got {a.skew!r}")
        if a.skew != 1 and a.collective != "all_to_all":
            raise SpecError("--skew", "applies to --collective all_to_all only")
        if a.link_rate is None:     # not given: each kind of fabric has its own default
            rate = IN.link_rate(a.ranks) if innetwork else parse_rate(DEFAULT_LINK_RATE, "--link-rate")
        else:
            rate = parse_rate(a.link_rate, "--link-rate")
        if not 1e5 <= rate <= 1e9:
            raise SpecError("--link-rate", f"must be between 100k and 1G (emulated host-link rate), got {a.link_rate}")
        trace = None
        if a.trace:
            trace = load_trace_file(a.trace)
            if a.jobs != 1:
                raise SpecError("--jobs", "a trace replay is one job")
        failures = ()
        if getattr(a, "failures", None):
            from testbed.failures import parse
            from testbed.plan import Overrides
            from testbed.plan.gray import gray_links_of

            G = fabric_graph(a.fabric)    # gray loss where the replica's plan shapes both ends with tc HTB
            failures = tuple(parse(a.failures, G, gray_links=gray_links_of(
                G, Overrides(scale=host_link_rate(G) / rate, links="rates"))))
        alone = bool(getattr(a, "alone", False))
        if alone and (a.jobs < 2 or innetwork):
            raise SpecError("--alone", "compares two or more jobs (--jobs 2 or more) of host collectives with "
                                       "themselves run alone; leave it out")
        if alone and failures:
            raise SpecError("--alone", "a failure schedule would hit only the run together, so the slowdown "
                                       "would mix in the failure: leave one of them out")
        ranks = a.ranks if trace is None else trace["ranks"]
        nics = () if innetwork else parse_nic_rates(getattr(a, "nic_rate", None), ranks,
                                                    host_link_rate(fabric_graph(a.fabric)), rate)
        return cls(a.fabric, a.collective, IN.ALGORITHM if innetwork else a.algorithm, ranks, tuple(sizes),
                   places * a.jobs if len(places) == 1 else places, a.jobs, bool(a.pods), a.chunks, a.iters,
                   a.warmup, float(a.skew), a.root, rate, trace, failures=failures, nic_rates=nics,
                   ovs_send_buffer=send_buffer_arg(getattr(a, "ovs_send_buffer", None)), alone=alone)


def algorithms(collective: str) -> tuple:
    """What ``--algorithm`` takes for ``collective``: its host schedules, and for allreduce ``innetwork``
    (on the aggregation fabrics, :mod:`testbed.collective.innetwork`)."""
    from testbed.collective.innetwork import ALGORITHM

    return S.ALGORITHMS[collective] + ((ALGORITHM,) if collective == "allreduce" else ())


def send_buffer_arg(text) -> int | None:
    """``--ovs-send-buffer SIZE`` (None: not given or ``off``: ovs-vswitchd's buffer left alone)."""
    if text is None or text == "off":
        return None
    from testbed.emu.ovssndbuf import parse_size_arg

    return parse_size_arg(text)


def add_send_buffer_option(p, default: str | None = None) -> None:
    """``--ovs-send-buffer SIZE|off``, the same on every command that runs collectives on a replica. Off unless
    ``default`` is named in the help (``testbed bench collective`` raises it by default: it measures what the
    replica reaches; the command resolves a flag left out itself, so the argparse default stays None)."""
    p.add_argument("--ovs-send-buffer", metavar="SIZE",
                   help="raise ovs-vswitchd's one send socket's buffer to SIZE (e.g. 4MiB) for each run, restored "
                        "after: its default 208 KiB loses frames under all-to-all; with it a ring's QPs keep 128 frames "
                        "in flight, not 32. The daemon is shared by every "
                        "OVS run on this machine; OVS userspace datapath only (docs/collectives.md). "
                        + (f"Default {default} where the switches run on that datapath; off leaves the buffer alone"
                           if default else "Default off"))


def host_link_rate(G) -> float:
    """The fabric's fastest host-link rate (real): ``--link-rate`` is its emulated value, so it fixes the scale."""
    return max(d["rate_bps"] for u, v, d in G.edges(data=True)
               if "host" in (G.nodes[u].get("role"), G.nodes[v].get("role")))


def parse_nic_rates(text: str | None, ranks: int, host_rate: float, link_rate: float) -> tuple:
    """``--nic-rate 1=25G,3=50G``: rank 1 of every job has a 25G NIC, rank 3 a 50G one (real units), the
    other ranks the fabric's host-link rate. A NIC slower than its switch port makes the link run at the
    NIC's rate (as a 25G NIC on a 100G port does, through a breakout or auto-negotiation), so the rank's host
    link is emulated at that rate / scale; faster than the port is refused (the port would gate it)."""
    if not text:
        return ()
    from testbed.units import format_rate

    out: dict = {}
    floor = host_rate * 1e5 / link_rate        # the emulated floor --link-rate has, in real units
    for item in str(text).split(","):
        rank_text, sep, rate_text = item.strip().partition("=")
        if not sep or not rank_text.strip().isdigit():
            raise SpecError("--nic-rate", f"{item.strip()!r} is not RANK=RATE (e.g. 1=25G)")
        r = int(rank_text)
        if r >= ranks:
            raise SpecError("--nic-rate", f"rank {r} does not exist: ranks are 0..{ranks - 1}")
        if r in out:
            raise SpecError("--nic-rate", f"rank {r} is given twice")
        bps = parse_rate(rate_text.strip(), "--nic-rate")
        if not floor <= bps <= host_rate:
            raise SpecError("--nic-rate", f"rank {r}: {rate_text.strip()} must be between {format_rate(floor)} "
                                          f"(100 kbit/s emulated at this --link-rate) and the fabric's host-link "
                                          f"rate {format_rate(host_rate)}")
        out[r] = bps
    return tuple(sorted(out.items()))


def with_nic_rates(G, placements: list[list], nic_rates: tuple):
    """A copy of ``G`` whose host links run at their rank's NIC rate (``nic_rates`` apply to every job)."""
    from testbed.topo.builder import set_link

    if not nic_rates:
        return G
    H = G.copy()      # fresh attribute dicts per edge; LinkParams are frozen
    for hosts in placements:
        for r, bps in nic_rates:
            for nbr in list(H.neighbors(hosts[r])):
                set_link(H, hosts[r], nbr, rate_bps=float(bps))
    return H


def check_job_count(fabric: str, jobs: int) -> None:
    """Refuse more jobs than ``fabric`` has hosts before a policy tuple of that length is made (``--jobs
    1e20`` must be one line, not an OverflowError); placement then checks that the ranks fit."""
    hosts = sum(1 for _, d in fabric_graph(fabric).nodes(data=True) if d["role"] == "host")
    if jobs > hosts:
        raise SpecError("--jobs", f"{jobs} jobs do not fit: fabric {fabric} has {hosts} hosts")


def load_trace_file(path: str) -> dict:
    import json
    from pathlib import Path

    from testbed.collective.trace import check, load_trace

    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SpecError("--trace", f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise SpecError("--trace", f"{path} is not JSON: {exc}") from None
    from testbed.collective.engine import ScheduleError

    try:
        check(load_trace(doc))
    except ScheduleError as exc:
        raise SpecError("--trace", f"{path} cannot complete: {exc}") from None
    return doc


def place_jobs(G, opts: Options) -> list[list]:
    """Hosts of each job in rank order: its own policy, hosts not used by the jobs before it; with
    ``pods`` each job in its own pod (fat-trees), so jobs share no switch below the core."""
    taken: list = []
    out = []
    pod_hosts = list(P.pods(G).values()) if opts.pods else []
    if opts.pods and len(pod_hosts) < opts.jobs:
        raise SpecError("--pods", f"{opts.jobs} jobs need {opts.jobs} pods; this fabric has {len(pod_hosts)}")
    for k in range(opts.jobs):
        hosts = P.place(G, opts.ranks, opts.placement[k], exclude=taken,
                        within=set(pod_hosts[k]) if opts.pods else None)
        taken += hosts
        out.append(hosts)
    return out


def job_runs(opts: Options, placements: list[list]):
    from testbed.collective.runner import JobRun

    runs = tuple({"collective": opts.collective, "algorithm": opts.algorithm, "bytes": b, "chunks": opts.chunks,
                  "root": opts.root, "skew": opts.skew} for b in opts.sizes)
    return [JobRun(f"job{k + 1}", tuple(h), runs=runs if opts.trace is None else (), trace=opts.trace,
                   iters=opts.iters, warmup=opts.warmup, chunks=opts.chunks, seed=k + 1)
            for k, h in enumerate(placements)]


def plot(jobs: list[dict], link_rate_bps: float, path, scale: float | None = None, compare: tuple = (),
         title: str | None = None) -> None:
    """``busbw.png`` (testbed/collective/figure.py: the series are pure and tested there)."""
    from testbed.collective import figure

    figure.plot(jobs, link_rate_bps, path, scale=scale, compare=compare, title=title)


def run(opts: Options, out_dir, tag: str = "run") -> dict:
    """Place, build, run, summarise (root)."""
    from testbed.collective import innetwork as IN

    if opts.algorithm == IN.ALGORITHM:
        return IN.run(opts, out_dir)
    from testbed.collective.report import nic_gating
    from testbed.collective.runner import CollectiveFabric

    G0 = fabric_graph(opts.fabric)
    placements = place_jobs(G0, opts)
    jobs = job_runs(opts, placements)
    G = with_nic_rates(G0, placements, opts.nic_rates)
    scale = host_link_rate(G0) / opts.link_rate_bps
    with CollectiveFabric(G, opts.link_rate_bps, out_dir, scale=scale, send_buffer=opts.ovs_send_buffer) as fab:
        fab.warm([h for p in placements for h in p])
        alone = {j.name: fab.run([j], f"alone-{j.name}", opts.timeout_s) for j in jobs} if opts.alone else {}
        result = fab.run(jobs, tag, opts.timeout_s, failures=list(opts.failures) or None)
        result["scale"] = fab.scale
    if alone:
        result["alone"] = alone_summary(alone, result, G)
    for j in result["jobs"]:
        j["nics"] = nic_gating(j["hosts"], {h: nic_rate(G, h) for h in j["hosts"]}, result["links"], scale)
    result["fabric"] = opts.fabric
    result["link_rate_bps"] = opts.link_rate_bps
    result["placements"] = {j.name: {"policy": opts.placement[k], "hosts": list(j.hosts),
                                     "ring_switch_hops": P.ring_hops(G, list(j.hosts))}
                            for k, j in enumerate(jobs)}
    return result


def alone_summary(alone: dict, together: dict, G) -> dict:
    """``--alone``: each job's JCT alone and together, its slowdown, each alone run's health and
    retransmitted frames (they put bytes on the links a clean run would not), and the fabric
    links two jobs shared (:mod:`testbed.collective.jobsfig`: used by both alone, or above any job's busiest
    link together); ``rows`` are what ``jobs.png`` draws."""
    from testbed.collective import jobsfig
    from testbed.topo.graph import hosts

    rows = jobsfig.link_rows({k: r["links"] for k, r in alone.items()}, together["links"], set(hosts(G)))
    both = {j["name"]: j["jct_s"] for j in together["jobs"]}
    return {"jct_alone_s": {k: r["jobs"][0]["jct_s"] for k, r in alone.items()}, "jct_together_s": both,
            "slowdown": {k: round(both[k] / r["jobs"][0]["jct_s"], 3) for k, r in alone.items()},
            "health": {k: {"ok": r["health"]["ok"], "reasons": r["health"]["reasons"]} for k, r in alone.items()},
            "retransmissions": {k: r["jobs"][0].get("qp_stats", {}).get("retransmissions", 0) for k, r in alone.items()},
            "shared_links": jobsfig.shared_links(rows), "above_links": jobsfig.above_links(rows), "rows": rows}


def alone_line(a: dict) -> str:
    """``# alone vs together ...``: the slowdowns and the links two jobs shared."""
    jobs = "; ".join(f"{k} {a['jct_alone_s'][k]:.3f} -> {a['jct_together_s'][k]:.3f} s (x{a['slowdown'][k]:.3f}"
                     + ("" if a["health"][k]["ok"] else ", alone run UNHEALTHY") + ")" for k in a["slowdown"])
    return (f"# alone -> together (JCT, emulated): {jobs}; fabric links used by two jobs alone: "
            f"{', '.join(a['shared_links']) or 'none'}, above any job's busiest link together: "
            f"{', '.join(a['above_links']) or 'none'} (jobs.png)")


def nic_rate(G, host) -> float:
    return min(G.edges[host, nbr]["rate_bps"] for nbr in G.neighbors(host))


def summary(result: dict) -> dict:
    jobs = []
    for j in result["jobs"]:
        doc = {"name": j["name"], "jct_s": round(j["jct_s"], 4), "real_jct_ms": round(j["real_jct_ms"], 4)}
        if j.get("rows"):
            last = j["rows"][-1]
            doc.update(largest_size_bytes=last["size_bytes"], busbw_bps=last["busbw_bps"],
                       busbw_over_link=round(last["busbw_bps"] / result["link_rate_bps"], 4),
                       wrong=sum(r["wrong"] for r in j["rows"]))
        if j.get("trace"):
            doc.update(step_time_s=j["trace"]["step_time_s"], wrong=j["trace"]["wrong"])
        nics = j.get("nics")
        if nics and nics["heterogeneous"]:
            doc["nics"] = {k: nics[k] for k in ("slowest_nic_bps", "slowest_ranks", "gate", "gate_utilisation",
                                                 "others_max_utilisation", "gate_is_slowest")}
            if j.get("rows"):
                emulated_slowest = nics["slowest_nic_bps"] / result["scale"]
                doc["nics"]["busbw_over_slowest_nic"] = round(j["rows"][-1]["busbw_bps"] / emulated_slowest, 4)
        jobs.append(doc)
    busiest = result["links"][0] if result["links"] else None
    fl = result.get("failures")
    if result.get("alone"):
        jobs_alone = {k: v for k, v in result["alone"].items() if k != "rows"}
    return {"fabric": result["fabric"], "scale": result["scale"], "link_rate_bps": result["link_rate_bps"],
            "jobs": jobs, "busiest_link": busiest, "emulator_ok": result["health"]["ok"],
            "health_reasons": result["health"]["reasons"], "load": result["health"]["load"],
            **({"failures": {k: fl[k] for k in ("log", "windows_s", "timeouts_inside", "timeouts_outside", "skipped",
                                                "restored", "error")}} if fl else {}),
            **({"alone": jobs_alone} if result.get("alone") else {})}


def nic_line(nics: dict) -> str:
    """``# NICs ...; gated by rank R``: each rank's NIC (real) and how busy its host link was."""
    from testbed.units import format_rate

    ranks = "  ".join(f"r{x['rank']} {x['host']} {format_rate(x['nic_bps'])} {x['busy']:.2f}" for x in nics["ranks"])
    g = nics["ranks"][nics["gate"]]
    verdict = (f"gated by rank {g['rank']} ({g['host']}, {format_rate(g['nic_bps'])} NIC): its host link busy "
               f"{g['busy']:.2f} of the run, the others at most {nics['others_max_utilisation']:.2f}")
    if not nics["gate_is_slowest"]:
        verdict += (f"; NOT a slowest NIC (ranks {nics['slowest_ranks']} at {format_rate(nics['slowest_nic_bps'])}):"
                    " a fabric link or the emulator held the job back")
    return f"# NICs (rank host rate busy): {ranks}; {verdict}"


def print_report(result: dict, quiet_stdout: bool = False) -> None:
    """The tables on stdout (on stderr with ``quiet_stdout``: ``--json`` keeps stdout to one document)."""
    from testbed.collective import metrics
    from testbed.console import console, out

    if quiet_stdout:
        out = console

    for j in result["jobs"]:
        qps = (f"; QP retransmissions {j['qp_stats']['retransmissions']}, timeouts {j['qp_stats']['timeouts']}"
               if "qp_stats" in j else "")
        console.print(f"[bold]{j['name']}[/bold] on {' '.join(str(h) for h in j['hosts'])}: JCT {j['jct_s']:.3f} s "
                      f"emulated = {j['real_jct_ms']:.3f} ms real{qps}")
        groups: dict = {}
        for r in j.get("rows") or []:
            groups.setdefault((r["collective"], r.get("algorithm"), r.get("skew", 1.0)), []).append(r)
        for (coll, algo, skew), rows in groups.items():
            out.print(metrics.table_text(rows).replace(f"# {coll},", f"# {coll} ({algo or 'default'}"
                                                       + (f", skew {skew:g}" if skew != 1 else "") + "),", 1))
        if j.get("aggregator"):
            from testbed.collective.innetwork import job_line

            out.print(job_line(j))
        nics = j.get("nics")
        if nics and nics["heterogeneous"]:
            out.print(nic_line(nics))
        if j.get("trace"):
            tr = j["trace"]
            out.print(f"# trace replay: step times (emulated s) {[round(s, 4) for s in tr['step_time_s']]}, "
                      f"real ms {[round(s, 4) for s in tr['real_step_time_ms']]}, #wrong {tr['wrong']}")
    fl = result.get("failures")
    if fl:
        for x in fl["log"]:
            out.print(f"# failure {x['event']}: done at {x['at_s']:.3f} s (planned {x['planned_s']:g}), took "
                      f"{x['took_s'] * 1e3:.1f} ms")
        out.print(f"# failure windows (s after the start) {fl['windows_s']}: QP timeouts inside {fl['timeouts_inside']}"
                  f" (the experiment), outside {fl['timeouts_outside']}; not reached {fl['skipped'] or 'none'}; "
                  f"restored at the end {fl['restored'] or 'none'}" + (f"; ERROR {fl['error']}" if fl["error"] else ""))
    if result.get("alone"):
        out.print(alone_line(result["alone"]))
    links = result["links"][:6]
    out.print("# busiest links: " + ", ".join(f"{x['link']} {x['utilisation']:.2f}" for x in links))
    h = result["health"]
    out.print(f"# emulator health: {'ok' if h['ok'] else 'UNHEALTHY: ' + '; '.join(h['reasons'])} "
              f"(machine CPU {h['cpu'].get('machine_mean', 0):.0f}%, {h.get('switch', 'ovs-vswitchd')} max "
              f"{h['cpu'].get('switch_max', 0):.0f}%"
              + (f", {h['cpu']['ovs_backlog']['max_bytes']:,} B waiting in its port sockets at the peak"
                 if h["cpu"].get("ovs_backlog") else "") + f", load {h['load']})")
    led = h.get("losses")
    if led:
        out.print(f"# frames: {led['sent']} sent, {led['lost']} lost ({led['counted_drops']} counted by queues or "
                  f"interfaces, {led['socket_enobufs'] + led.get('udp_rcvbuf_errors', 0)} refused by sockets, "
                  f"{led['endpoint_discards']} discarded by endpoints, {led.get('emulator_lost', 0)} lost inside "
                  f"the emulator {led.get('emulator', {})}, of all these {led.get('others_lost', 0)} the hosts' own "
                  f"frames; {led['unattributed']} unattributed)")
