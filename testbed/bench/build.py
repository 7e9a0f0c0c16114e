"""``testbed bench build [SPEC ...]``: how long a replica takes to build and tear down, and what it costs.

With SPECs it builds each fabric in turn, both ways one after the other under one run lock:

    replica   testbed.emu.Replica (offloads off, static ARP, rate shaping per --links, readiness polled)
    plain     Mininet building the identical graph through a Topo with no extras (same OVS switch class,
              datapath and fail mode; no shaping, no offload changes, no ARP, no readiness wait)

and reports nodes, links, build seconds, teardown seconds and peak memory (RSS of this process and its
node shells plus ovs-vswitchd, above the baseline, sampled every 50 ms) for each, and replica/plain ratios,
one row per spec in one table (``testbed bench build fat-tree-k4 fat-tree-k8 fat-tree-k16``). Every spec is
checked (name, size, memory for the links mode asked for) before anything is built.
Looped fabrics (fat-tree, torus, ...) are built with OVS in ``secure`` fail mode pointing at a port
nobody listens on, so no switch forwards (no broadcast storm) and no controller time is counted;
loop-free ones use ``standalone`` as a replica would.

Without SPEC it runs the emulation core's sweep: loop-free spine-leaf fabrics of growing size, each
built as a Replica, pinged from the first host to all others (flow setup), iperf3 across it unshaped (what
the OVS userspace datapath forwards), torn down.

A replica's teardown is timed until its run holds nothing more (shells exited, interfaces gone), and
printed step by step on stderr (``teardown: bridges 92.2 s, links 20.7 s, ...``; ``runs.replica[i].
teardown_stages_s``). ``--kill`` measures the crash path instead: the replica is built in a child process
(:mod:`testbed.bench.hold`) that is SIGKILLed once up, and "teardown" is ``testbed clean`` removing what
it left (``left``: what clean could not remove, 0 when healthy); plain Mininet is not run with it (its
``mn -c`` removes every bridge on the machine, other people's too).

``--json``: with SPECs a list, one object per spec in the order given: spec, nodes, switches, hosts, links,
replica{build_s, teardown_s, peak_memory_mb}, plain{...} (null with --no-plain or --kill), build_ratio,
teardown_ratio, memory_ratio, teardown_by, runs, load_before, load_after; without: cases[{switches, hosts,
links, build_s, ping_s, teardown_s, tcp_bps}].
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

import networkx as nx

from testbed.console import console, out, print_json, require_root
from testbed.emu import cpustat
from testbed.errors import UsageError
from testbed.poll import poll
from testbed.topo.graph import hosts, switches

LINK_MODES = ("htb", "spec", "none")


def register(sub) -> None:
    parser = sub.add_parser("build", help="replica build/teardown time and memory vs plain Mininet",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", metavar="SPEC", nargs="*",
                        help="spec files or shipped examples (e.g. fat-tree-k4 fat-tree-k8), one table row "
                             "each; omit for the spine-leaf sweep")
    parser.add_argument("--links", choices=LINK_MODES, default="htb",
                        help="replica link emulation: htb = rate shaping only (default), spec = the full "
                             "link layer (delay lines where the spec has delays), none")
    parser.add_argument("--repeat", type=int, default=1, help="builds of each kind; medians are reported")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain Mininet comparison")
    parser.add_argument("--kill", action="store_true",
                        help="crash instead of tearing down: build the replica in a child process, SIGKILL "
                             "it once up and time `testbed clean` (replica only: plain Mininet's `mn -c` "
                             "removes everyone's bridges)")
    parser.add_argument("--quick", action="store_true", help="sweep: two small fabrics only")
    parser.add_argument("--out", metavar="DIR", help="folder for replica logs (default: none)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(func=_main)


# ------------------------------------------------------------------------------------------ pure
def is_looped(G: nx.Graph) -> bool:
    """True when the switch graph has a cycle (OVS standalone learning would storm)."""
    S = G.subgraph(switches(G))
    return S.number_of_edges() >= S.number_of_nodes() - nx.number_connected_components(S) + 1


def ratios(replica: dict, plain: dict | None) -> dict:
    """replica / plain for build, teardown and memory (None where plain is missing or zero)."""
    names = {"build_s": "build_ratio", "teardown_s": "teardown_ratio", "peak_memory_mb": "memory_ratio"}
    return {name: (round(replica[key] / plain[key], 3) if plain and plain.get(key) else None)
            for key, name in names.items()}


def median_run(runs: list[dict]) -> dict:
    """Median of each figure over ``runs`` (per-stage breakdowns stay in ``runs``)."""
    return {key: round(statistics.median(r[key] for r in runs), 3) for key, value in runs[0].items()
            if isinstance(value, (int, float))}


TABLE_METRICS = (("build_s", "build s"), ("teardown_s", "teardown s"), ("peak_memory_mb", "peak MB"))
TABLE_RATIOS = (("build_ratio", "build"), ("teardown_ratio", "teardown"), ("memory_ratio", "memory"))


def _cell(value) -> str:
    return "-" if value is None else f"{value:g}"


def table(docs: list[dict]) -> list[str]:
    """The side-by-side table of several specs' results (pure): a two-line header, one row per spec.

    Columns: spec, nodes, links, replica and plain for build s, teardown s and peak MB, the replica/plain
    ratios, and the 1-minute load average before -> after; ``-`` where plain was not built.
    """
    head = ["spec", "nodes", "links"] + ["replica", "plain"] * len(TABLE_METRICS) + \
        [label for _, label in TABLE_RATIOS] + ["before->after"]
    rows = []
    for d in docs:
        plain = d["plain"] or {}
        row = [d["spec"], str(d["nodes"]), str(d["links"])]
        for key, _ in TABLE_METRICS:
            row += [_cell(d["replica"][key]), _cell(plain.get(key))]
        row += [_cell(d[key]) for key, _ in TABLE_RATIOS]
        row.append(f"{d['load_before'].split(', ')[0]}->{d['load_after'].split(', ')[0]}")
        rows.append(row)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    # the first header line: each label centred over the columns it spans (replica + plain, the ratios)
    spans = [("", 3)] + [(label, 2) for _, label in TABLE_METRICS] + [("replica/plain", len(TABLE_RATIOS)),
                                                                      ("load", 1)]
    top, i = [], 0
    for label, n in spans:
        width = sum(widths[i:i + n]) + 2 * (n - 1)
        if len(label) > width:  # widen the span's last column to fit its label
            widths[i + n - 1] += len(label) - width
            width = len(label)
        top.append(label.center(width))
        i += n

    def line(cells):
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([cells[0].ljust(widths[0]), *rest])

    return ["  ".join(top).rstrip()] + [line(r).rstrip() for r in (head, *rows)]


def sizes(quick: bool) -> list[tuple[int, int]]:
    """Sweep cases: (leaves, hosts_per_leaf) of one-spine spine-leaf fabrics."""
    return [(2, 1), (8, 2)] if quick else [(2, 1), (8, 2), (16, 4), (32, 2)]


# ------------------------------------------------------------------------------------------ glue
class _MemorySampler:
    """Peak RSS (MB) of this process tree plus ovs-vswitchd above a baseline, sampled in a thread."""

    def __init__(self, interval: float = 0.05):
        import psutil

        self._psutil = psutil
        self.interval = interval
        self._stop = threading.Event()
        self.baseline = self._sample()
        self.peak = self.baseline
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> float:
        ps = self._psutil
        me = ps.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)] + [p for p in ps.process_iter(["name"])
                                                          if p.info["name"] == "ovs-vswitchd"]:
            try:
                total += proc.memory_info().rss
            except (ps.NoSuchProcess, ps.AccessDenied):
                continue
        return total / 1e6

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):  # a sampling period, not a wait for a condition
            self.peak = max(self.peak, self._sample())

    def __enter__(self) -> "_MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())

    @property
    def peak_mb(self) -> float:
        return round(self.peak - self.baseline, 1)


def _controller(G: nx.Graph):
    """A dead controller address for looped fabrics (secure mode, no forwarding), else None."""
    if not is_looped(G):
        return None
    from testbed.plan.alloc import tcp_port_free

    port = next(p for p in range(16653, 17653) if tcp_port_free(p))
    return ("127.0.0.1", port)


def _plan(G: nx.Graph, links: str, capabilities=None):
    """The replica plan ``bench build`` builds for ``--links`` (pure with the default, worst-case,
    capabilities: no netem, so every delayed link a userspace delay line)."""
    from testbed.plan import Overrides, plan_replica
    from testbed.plan.replica import ASSUMED

    mode = {"none": "off", "htb": "rates", "spec": "spec"}[links]
    return plan_replica(G, capabilities or ASSUMED, Overrides(links=mode))


def _build_replica(G: nx.Graph, plan, run, out_dir) -> dict:
    """Build and tear down ``plan``'s replica once: seconds for each, peak memory."""
    from testbed.emu import Replica
    from testbed.links.node import DelayLineNode

    rep = Replica(plan, controller=_controller(G), run=run, name="bench-build", out_dir=out_dir, wait_connected=0,
                  link_node_class=DelayLineNode)
    with _MemorySampler() as mem:
        t0 = time.perf_counter()
        rep.__enter__()
        t1 = time.perf_counter()
        rep.__exit__(None, None, None)
        run.sweep()  # what the replica left to its run (shells still exiting): part of the teardown
        t2 = time.perf_counter()
    stages = {**rep.teardown_s, **{f"registry {k}": v for k, v in run.timings.items()}}
    console.print("[dim]teardown: " + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()) + "[/dim]")
    return {"build_s": round(t1 - t0, 3), "teardown_s": round(t2 - t1, 3), "peak_memory_mb": mem.peak_mb,
            "teardown_stages_s": stages}


def _build_killed(spec: str, links: str, out_dir) -> dict:
    """Build ``spec``'s replica in a child (:mod:`testbed.bench.hold`), SIGKILL it once up, so none of its
    teardown runs, and time what ``testbed clean`` then does: seconds to build (child start to up), to
    clean, peak memory, and what clean could not remove (``left``: must be 0)."""
    import signal
    import subprocess
    import sys

    from testbed.emu.registry import clean
    from testbed.errors import EmulationError

    argv = [sys.executable, "-m", "testbed.bench.hold", spec, "--links", links]
    if out_dir:
        argv += ["--out", str(out_dir)]
    with _MemorySampler() as mem:
        t0 = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
        line = child.stdout.readline()  # "up" once built; EOF when the child failed (its error on stderr)
        if line.strip() != "up":
            child.wait()
            raise EmulationError(f"bench build --kill: the replica of {spec} did not come up in the child "
                                 f"(exit {child.returncode}); see its error above")
        t1 = time.perf_counter()
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        t2 = time.perf_counter()
        reports = clean()  # exactly `testbed clean`
        t3 = time.perf_counter()
    left = sum(len(r["failed"]) + len(r["kept"]) for r in reports)
    removed = sum(len(r["removed"]) for r in reports)
    console.print(f"[dim]testbed clean after SIGKILL: {removed} objects removed in {t3 - t2:.1f} s, "
                  f"{left} left[/dim]")
    return {"build_s": round(t1 - t0, 3), "teardown_s": round(t3 - t2, 3), "peak_memory_mb": mem.peak_mb,
            "left": left}


def _build_plain(G: nx.Graph, run) -> dict:
    """Plain Mininet: a Topo of the same nodes, ports and addresses, default Mininet start and stop."""
    from functools import partial

    from mininet import log
    from mininet.net import Mininet
    from mininet.node import OVSSwitch, RemoteController
    from mininet.topo import Topo

    from testbed.plan.layout import interfaces, layout

    log.setLogLevel("error")
    p = layout(G)
    topo = Topo()
    for h in p.hosts:
        topo.addHost(h.name, ip=f"{h.ip}/{h.prefixlen}", mac=h.mac)
    for sw in p.switches:
        topo.addSwitch(sw.name, dpid=f"{sw.dpid:016x}")
    for link in p.links:
        topo.addLink(p.names[link.u], p.names[link.v], port1=link.port_u, port2=link.port_v)
    controller = _controller(G)
    switch = partial(OVSSwitch, datapath="user", protocols="OpenFlow13",
                     failMode="secure" if controller else "standalone")
    run.record_bridges([sw.name for sw in p.switches])
    run.record_links(interfaces(p) + [sw.name for sw in p.switches])
    ctl = partial(RemoteController, ip=controller[0], port=controller[1]) if controller else None
    with _MemorySampler() as mem:
        t0 = time.perf_counter()
        net = Mininet(topo=topo, switch=switch, controller=ctl, autoSetMacs=False, waitConnected=False)
        try:
            net.start()
            t1 = time.perf_counter()
        finally:
            net.stop()
            run.sweep()
        t2 = time.perf_counter()
    return {"build_s": round(t1 - t0, 3), "teardown_s": round(t2 - t1, 3), "peak_memory_mb": mem.peak_mb}


def load_graphs(args) -> list[tuple[nx.Graph, object]]:
    """(graph, worst-case replica plan) of every SPEC, in order; all refused up front (exit 2, one line)
    when a flag or any spec is wrong or this machine cannot build it, so nothing is built for a bad list.
    Pure but for /proc/meminfo: no root, no probes."""
    from testbed.plan.limits import check_buildable, refuse_huge
    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    if args.repeat < 1:
        raise UsageError(f"--repeat must be >= 1, got {args.repeat}")
    specs = [load_spec(resolve_spec(name)) for name in args.specs]  # every name first: cheap and exact
    for spec in specs:
        refuse_huge(spec)
    out = []
    for spec in specs:
        G = build_graph(spec)
        plan = _plan(G, args.links)
        other = sorted({sw.kind for sw in plan.switches} - {"ovs"})
        if other:
            raise UsageError(f"{spec.name}: its switches are {', '.join(other)}; bench build times OVS "
                             "replicas against plain Mininet (OVS) only")
        check_buildable(G, plan=plan)   # interfaces and memory of the plan for --links, not the worst case
        out.append((G, plan))
    return out


def load_average() -> str:
    """The 1/5/15-minute load averages, as ``uptime`` prints them (every figure here depends on them)."""
    return ", ".join(f"{x:.2f}" for x in cpustat.load_average())


def _build_both(args, G: nx.Graph, plan, replica_runs: list, plain_runs: list) -> None:
    """``--repeat`` builds of each kind, plain Mininet first, under one run registry."""
    from testbed.emu import RunRegistry

    with RunRegistry("bench-build") as run:
        for i in range(args.repeat):
            if not args.no_plain:
                console.print(f"[dim]plain Mininet build {i + 1}/{args.repeat}[/dim]")
                plain_runs.append(_build_plain(G, run))
            console.print(f"[dim]replica build {i + 1}/{args.repeat}[/dim]")
            replica_runs.append(_build_replica(G, plan, run, args.out))


def _spec_bench(args, spec: str, G: nx.Graph, plan) -> dict:
    doc = {"spec": G.graph["name"], "kind": G.graph["kind"], "nodes": G.number_of_nodes(),
           "switches": len(switches(G)), "hosts": len(hosts(G)), "links": G.number_of_edges(),
           "looped": is_looped(G), "links_mode": args.links, "scale": G.graph["scale"], "repeat": args.repeat}
    replica_runs, plain_runs = [], []
    doc["load_before"] = load_average()
    doc["teardown_by"] = "testbed clean after SIGKILL" if args.kill else "the replica's teardown"
    if args.kill:
        for i in range(args.repeat):
            console.print(f"[dim]replica build {i + 1}/{args.repeat}, then SIGKILL and testbed clean[/dim]")
            replica_runs.append(_build_killed(spec, args.links, args.out))
    else:
        _build_both(args, G, plan, replica_runs, plain_runs)
    doc["replica"] = median_run(replica_runs)
    doc["plain"] = median_run(plain_runs) if plain_runs else None
    doc.update(ratios(doc["replica"], doc["plain"]))
    doc["runs"] = {"replica": replica_runs, "plain": plain_runs}
    doc["load_after"] = load_average()
    console.print(f"[dim]{doc['spec']}: replica build {doc['replica']['build_s']} s, teardown "
                  f"{doc['replica']['teardown_s']} s[/dim]")
    return doc


def _specs_bench(args, graphs) -> list[dict]:
    """Every spec in turn, planned with this machine's capabilities (probed once); the table (stdout) once
    all are measured."""
    from testbed.doctor import plan_capabilities

    caps = plan_capabilities()
    docs = [_spec_bench(args, spec, G, _plan(G, args.links, caps)) for spec, (G, _) in zip(args.specs, graphs,
                                                                                          strict=True)]
    if not args.json:
        if args.kill:
            out.print("teardown s = `testbed clean` after SIGKILL of the process that built the replica")
        out.print(f"bench build, links={args.links}, medians of {args.repeat} build(s) of each kind; "
                  f"load average {docs[0]['load_before']} before, {docs[-1]['load_after']} after "
                  f"({os.cpu_count()} cores)")
        for line in table(docs):
            out.print(line, soft_wrap=True)
    return docs


def _iperf(rep, src, dst) -> float:
    server = rep.popen(dst, ["iperf3", "-s", "-1"], stdout=-3, stderr=-3)
    poll(lambda: ":5201" in rep.host(dst).cmd("ss -ltn"), timeout=10, what="iperf3 server")
    out = rep.host(src).cmd("iperf3", "-c", rep.ip(dst), "-t", "3", "-J")
    server.wait(timeout=30)
    return json.loads(out[out.index("{"):])["end"]["sum_received"]["bits_per_second"]


def _sweep(args) -> dict:
    from testbed.doctor import plan_capabilities
    from testbed.emu import Replica
    from testbed.plan import Overrides, plan_replica
    from testbed.topo import generators

    cases = []
    for leaves, per_leaf in sizes(args.quick):
        G = generators.spine_leaf(leaves, 1, per_leaf)
        hs = hosts(G)
        t0 = time.monotonic()
        rep = Replica(plan_replica(G, plan_capabilities(), Overrides(links="off")), name="bench-build")
        with rep:
            t1 = time.monotonic()
            for h in hs[1:]:
                rep.host(hs[0]).cmd("ping", "-c1", "-W2", rep.ip(h))
            t2 = time.monotonic()
            tcp = _iperf(rep, hs[0], hs[-1])
            t3 = time.monotonic()
        t4 = time.monotonic()
        case = {"switches": leaves + 1, "hosts": len(hs), "links": G.number_of_edges(),
                "build_s": round(t1 - t0, 2), "ping_s": round(t2 - t1, 2), "teardown_s": round(t4 - t3, 2),
                "tcp_bps": tcp}
        cases.append(case)
        if not args.json:
            out.print(f"{case['switches']:3d} switches {case['hosts']:3d} hosts: build {case['build_s']:.1f} s, "
                      f"pings {case['ping_s']:.1f} s, teardown {case['teardown_s']:.1f} s, "
                      f"TCP {tcp / 1e6:.0f} Mb/s")
    return {"cases": cases}


def _main(args) -> int:
    graphs = load_graphs(args) if args.specs else None
    require_root("testbed bench build")
    doc = _specs_bench(args, graphs) if args.specs else _sweep(args)
    if args.json:
        print_json(doc)
    return 0
