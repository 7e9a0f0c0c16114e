"""``testbed cluster plan|run SPEC``: a replica partitioned over several machines (docs/cluster.md).

    testbed cluster plan SPEC --workers 2                 # the partition only: parts, loads, cut (no root)
    sudo testbed cluster run SPEC --workers root@h1,root@h2 [--underlay IP1,IP2] [--accept-new-host-keys]

``run`` connects to every worker over SSH (strict host keys from known_hosts; keys only), builds each
worker's part with the same Replica code under the fabric controller running here on 127.0.0.1 (reached
through SSH port forwards), joins the parts with VXLAN tunnels, synchronises the start, checks it
(all-pairs ping, iperf3 across the cut) and tears every part down, also on Ctrl-C or when a worker is
lost. ``--hold`` keeps it up after the checks until Ctrl-C. Results: ``results/cluster/<timestamp>/``.
Workers come from ``--workers`` or the spec's ``cluster:`` block.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
from pathlib import Path

from testbed.cli import add_verbs
from testbed.console import console, data_console, out, print_json
from testbed.errors import SpecError


def register(sub) -> None:
    parser = sub.add_parser("cluster", help="a replica partitioned over several machines (SSH)",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = add_verbs(parser)
    p = verbs.add_parser("plan", help="how SPEC is split over N workers (no root, no SSH)")
    p.add_argument("spec", metavar="SPEC", help="spec file or shipped example name")
    p.add_argument("--workers", metavar="N|LIST", help="a number, or user@host,... (default: the spec's cluster:)")
    p.add_argument("--imbalance", type=float, help="tolerated load imbalance per worker (default 0.1)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=_plan)
    r = verbs.add_parser("run", help="build SPEC over the workers, check it, tear it down")
    r.add_argument("spec", metavar="SPEC", help="spec file or shipped example name")
    r.add_argument("--workers", metavar="LIST", help="user@host[:port],... (default: the spec's cluster:)")
    r.add_argument("--underlay", metavar="IPS", help="each worker's tunnel address, same order (default: its host)")
    r.add_argument("--accept-new-host-keys", action="store_true",
                   help="record the key of a host not yet in known_hosts (a changed key is always refused)")
    r.add_argument("--known-hosts", metavar="FILE", help="host keys (default ~/.ssh/known_hosts)")
    r.add_argument("--identity", metavar="FILE", help="private key (default: the SSH agent and ~/.ssh/id_*)")
    r.add_argument("--scale", type=float, metavar="N", help="time dilation (default: the spec's)")
    r.add_argument("--links", default="spec", metavar="MODE", help="spec | rates | off (default spec)")
    r.add_argument("--iperf-seconds", type=float, default=10.0, metavar="S", help="length of the iperf3 test")
    r.add_argument("--udp-flows", type=int, default=0, metavar="N",
                   help="also measure packets/s: N concurrent iperf3 UDP flows across the fabric's 2-way cut "
                        "(64 B datagrams, --iperf-seconds long; default 0: none); runs with --no-checks too")
    r.add_argument("--udp-kpps", type=float, default=10.0, metavar="K", help="offered kpps per UDP flow (default 10)")
    r.add_argument("--hold", action="store_true", help="after the checks, stay up until Ctrl-C")
    r.add_argument("--no-checks", action="store_true", help="skip the all-pairs ping and the iperf3 test")
    r.add_argument("--dry-run", action="store_true", help="workers plan their part but build nothing")
    r.add_argument("--out", metavar="DIR", help="results folder (default results/cluster/<timestamp>)")
    r.add_argument("--json", action="store_true", help="the results document on stdout")
    r.set_defaults(func=_run)


def _spec(arg: str):
    from testbed.topo.spec import load_spec, resolve_spec

    path = resolve_spec(arg)
    return path, load_spec(path)


def _workers(args, spec):
    from testbed.topo.workers import ClusterConfig, parse_workers

    if args.workers:
        return ClusterConfig(parse_workers(args.workers, getattr(args, "underlay", None)))
    if getattr(args, "underlay", None):
        raise SpecError("--underlay", "needs --workers (the spec's cluster: block gives underlay: per worker)")
    if spec.cluster is None:
        raise SpecError("--workers", "no workers: give --workers user@host1,user@host2 or a cluster: block in the spec")
    return spec.cluster


def _plan(args) -> int:
    from testbed.cluster.partition import DEFAULT_IMBALANCE, partition
    from testbed.topo.spec import build_graph

    _, spec = _spec(args.spec)
    if args.workers and args.workers.strip().isdigit():
        n, imbalance = int(args.workers), DEFAULT_IMBALANCE
    else:
        cfg = _workers(args, spec)
        n, imbalance = len(cfg.workers), cfg.imbalance
    if args.imbalance is not None:
        imbalance = args.imbalance
    G = build_graph(spec)
    part = partition(G, n, imbalance, field="--workers" if args.workers else "cluster.workers")
    doc = part.to_json()
    if args.json:
        print_json(doc)
        return 0
    out.print(f"{spec.name}: {n} workers, {len(part.cut)} links cut ({part.cut_capacity_bps / 1e9:g} Gbit/s "
              f"real), load spread {part.load_spread():.3f} (1.0 = even)")
    for w in range(n):
        switches = [str(x) for x in part.nodes(w) if G.nodes[x].get("role") != "host"]
        hosts = len(part.nodes(w)) - len(switches)
        out.print(f"  worker {w}: load {part.loads[w]:g}, {hosts} hosts, {len(switches)} switches: {' '.join(switches)}")
    for c in doc["cut"]:
        out.print(f"  tunnel VNI {c['vni']}: {c['u']} (w{c['worker_u']}) -- {c['v']} (w{c['worker_v']})")
    return 0


def _run(args) -> int:
    from testbed.cluster import checks
    from testbed.cluster.coordinator import Cluster
    from testbed.cluster.ssh import SshOptions
    from testbed.console import require_root
    from testbed.plan import Overrides
    from testbed.scenario import _check_creatable

    path, spec = _spec(args.spec)
    cfg = _workers(args, spec)
    if args.scale is not None and not 0 < args.scale < float("inf"):
        raise SpecError("--scale", f"expected a positive number such as 1000, got {args.scale:g}")
    if not 0 < args.iperf_seconds <= 600:
        raise SpecError("--iperf-seconds", f"expected 0 < S <= 600, got {args.iperf_seconds:g}")
    if args.udp_flows:
        from testbed.topo.spec import build_graph

        checks.check_udp_load(build_graph(spec), cfg.imbalance, args.udp_flows, args.udp_kpps)   # nothing built
    overrides = Overrides(scale=args.scale, links=args.links)
    ssh = SshOptions(known_hosts=args.known_hosts or cfg.known_hosts, identity=args.identity or cfg.identity,
                     accept_new=args.accept_new_host_keys)
    out_dir = Path(args.out) if args.out else Path("results") / "cluster" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    _check_creatable(out_dir, "--out")
    if not args.dry_run:
        require_root("testbed cluster run")
    doc: dict = {"spec": str(path), "workers": [w.label for w in cfg.workers]}
    with Cluster(path, cfg.workers, out_dir, overrides=overrides, ssh=ssh, imbalance=cfg.imbalance,
                 dry_run=args.dry_run) as cl:
        doc["timings"] = cl.timings
        doc["partition"] = {"cut": len(cl.partition.cut), "cut_capacity_bps": cl.partition.cut_capacity_bps,
                            "load_spread": cl.partition.load_spread()}
        if args.dry_run:
            doc["workers_ready"] = [{"worker": w.label, **w.ready} for w in cl.workers]
            for w in cl.workers:
                console.print(f"{w.label}: {len(w.ready.get('commands', []))} tunnel commands, "
                              f"controller reached: {w.ready.get('controller_reached')}")
        data = data_console(args.json)   # the checks' verdicts are data; --json keeps stdout to one document
        if not args.dry_run and not args.no_checks:
            doc["pingall"] = checks.pingall(cl)
            data.print(f"pingall: {doc['pingall']['pairs'] - len(doc['pingall']['lost'])}/"
                          f"{doc['pingall']['pairs']} pairs answered")
        if not args.dry_run and not args.no_checks and cl.partition.cut:   # one worker: no cut to check
            doc["iperf_cut"] = checks.iperf_cut(cl, args.iperf_seconds)
            ip = doc["iperf_cut"]
            data.print(f"iperf3 across the cut {ip.get('src')} -> {ip.get('dst')}: "
                          f"{ip.get('received_bps', 0) / 1e6:.2f} Mbit/s of {ip.get('rate_bps', 0) / 1e6:.2f} "
                          f"(ratio {ip.get('ratio')}, {'pass' if ip['passed'] else 'FAIL'})")
            doc["failover_cut"] = fo = checks.failover_cut(cl)
            data.print(f"failover across the cut ({'--'.join(fo.get('failed', []))}): rerouted in "
                          f"{fo.get('reroute_s')} s, ping loss {fo.get('ping_loss_pct')} % "
                          f"({'pass' if fo['passed'] else 'FAIL: ' + str(fo.get('why', ''))})")
        if not args.dry_run and args.udp_flows:
            doc["udp_load"] = ld = checks.udp_load(cl, args.udp_flows, args.udp_kpps, args.iperf_seconds)
            busy = ", ".join(f"{k} {v if v is None else f'{v:.2f}'}" for k, v in ld["cpu_busy"].items())
            data.print(f"UDP load, {ld['flows']} flows x {args.udp_kpps:g} kpps asked: offered {ld['offered_pps']:.0f} "
                       f"pps, delivered {ld['delivered_pps']:.0f} pps (loss {ld['loss_pct']} %); CPU busy: {busy}"
                       + ("" if ld["passed"] else f" (FAIL: {ld['reported']}/{ld['flows']} flows reported)"))
        doc["passed"] = all(doc[k]["passed"] for k in ("pingall", "iperf_cut", "failover_cut", "udp_load") if k in doc)
        (out_dir / "results.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
        if args.hold:
            console.print("cluster: up; Ctrl-C tears every worker down")
            cl.hold()
    if args.json:
        print_json(doc)
    console.print(f"cluster: results in {out_dir}")
    return 0 if doc["passed"] else 1
