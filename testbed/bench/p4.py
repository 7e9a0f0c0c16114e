"""``testbed bench p4``: forwarding rate of p4/fabric.p4 on BMv2 (anchor: ~80 kpps optimized, bmv2
docs/performance.md, with dedicated cores).

    netns p4b-h1 [10.0.9.1] --veth-- port 1  simple_switch_fast  port 2 --veth-- [10.0.9.2] netns p4b-h2
             iperf3 -u -b OFFER -l SIZE  ------------------------------------->  iperf3 -s

For each payload size the sender offers a ladder of packet rates; the most that arrives per second is the
switch's forwarding rate. Offering far too much lowers it (the sender takes the CPU the switch needs: the
sender, switch and receiver share this machine's CPUs), so the figure is a lower bound. Hosts resolve each other through fabric.p4's proxy ARP.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from testbed.console import console, out, print_json, require_root
from testbed.errors import EmulationError, SpecError

NS = ("p4b-h1", "p4b-h2")
ADDR = ("10.0.9.1", "10.0.9.2")
MACS = ("02:0a:00:09:00:01", "02:0a:00:09:00:02")
ROUTER_MAC = "02:fe:00:00:00:09"


def register(sub) -> None:
    p = sub.add_parser("p4", help="BMv2 forwarding rate of p4/fabric.p4", description=__doc__)
    p.add_argument("--duration", type=float, default=4.0, help="seconds per payload size (default 4)")
    p.add_argument("--sizes", default="64,1400", help="UDP payload sizes in bytes (default 64,1400)")
    p.add_argument("--offer-kpps", default="10,20,40,80",
                   help="offered packet rates to try, kpps (default 10,20,40,80); the best forwarded wins")
    p.add_argument("--binary", choices=("fast", "log"), default="fast",
                   help="simple_switch_fast (default) or the logging build simple_switch (logging off)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=_main)


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SpecError("--sizes", f"expected comma-separated byte counts such as 64,1400, got {text!r}") from None
    if not sizes or any(not 16 <= s <= 8900 for s in sizes):
        raise SpecError("--sizes", f"each size must be 16..8900 bytes, got {text!r}")
    return sizes


def parse_sizes_kpps(text: str) -> list[float]:
    try:
        rates = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SpecError("--offer-kpps", f"expected comma-separated rates such as 10,20,40, got {text!r}") from None
    if not rates or any(not 0 < r <= 10000 for r in rates):
        raise SpecError("--offer-kpps", f"each rate must be in (0, 10000] kpps, got {text!r}")
    return rates


def received_rate(doc: dict, duration: float) -> dict:
    """Forwarded packets/s and bits/s from an iperf3 UDP client JSON (with the server's report).

    Raises:
        EmulationError: the JSON has no end-of-test summary.
    """
    try:
        s = doc["end"]["sum"]
        total, lost = int(s["packets"]), int(s["lost_packets"])
        seconds = float(s.get("seconds") or duration)
        size = int(doc["start"]["test_start"]["blksize"])
    except (KeyError, TypeError, ValueError) as exc:
        raise EmulationError(f"iperf3 gave no summary ({exc}): {str(doc)[:200]}") from None
    got = max(0, total - lost)
    return {"offered_pps": total / seconds, "forwarded_pps": got / seconds,
            "forwarded_mbps": got * size * 8 / seconds / 1e6, "loss": lost / total if total else 0.0}


def _main(args) -> int:
    sizes = parse_sizes(args.sizes)
    parse_sizes_kpps(args.offer_kpps)
    if not 0 < args.duration <= 600:
        raise SpecError("--duration", f"seconds per payload size, in (0, 600], got {args.duration:g}")
    require_root("testbed bench p4")
    from testbed.emu.registry import RunRegistry
    from testbed.p4rt import entries as E
    from testbed.p4rt.compile import compile_p4
    from testbed.p4rt.switch import Bmv2Config, Bmv2Process
    from testbed.plan.alloc import Allocator
    from testbed.scenario import REPO_ROOT

    json_path = compile_p4(REPO_ROOT / "p4" / "fabric.p4")
    rows = []
    out_dir = Path("/tmp") / f"testbed-bench-p4-{int(time.time())}"
    with RunRegistry("bench-p4") as run:
        ports = {}
        for i, (ns, addr, mac) in enumerate(zip(NS, ADDR, MACS, strict=True), start=1):
            run.add_netns(ns)
            run.add_veth(f"{ns}-e", f"p4b-s{i}", ns_a=ns)
            _ns(ns, "ip", "addr", "add", f"{addr}/24", "dev", f"{ns}-e")
            _ns(ns, "ip", "link", "set", f"{ns}-e", "address", mac)
            ports[i] = f"p4b-s{i}"
        extra = ()
        cfg = Bmv2Config(name="p4b", json_path=json_path, ports=ports, log_dir=out_dir, extra_args=extra,
                         **Allocator(29190).switch("p4b"))
        proc = Bmv2Process(cfg)
        if args.binary == "log":
            from testbed.p4rt.switch import LOG_BINARY, pick_binary, switch_argv

            proc.binary = pick_binary(log=True)
            proc.argv = switch_argv(cfg, proc.binary)
            assert LOG_BINARY in proc.binary
        proc.start(run)
        proc.wait_ready()
        with proc.client() as c:
            prog = E.switch_config_entries(ROUTER_MAC)
            for i, (addr, mac) in enumerate(zip(ADDR, MACS, strict=True), start=1):
                prog += E.route_entries(f"{addr}/32", i, [i], ROUTER_MAC, mac)
            c.apply(prog)
        for size, kpps in [(s, k) for s in sizes for k in parse_sizes_kpps(args.offer_kpps)]:
            server = run.spawn(["iperf3", "-s", "-B", ADDR[1]], netns=NS[1], log=out_dir / "iperf3-s.log")
            try:
                from testbed.poll import poll

                poll(lambda: ":5201" in _ns_out(NS[1], "ss", "-Hltn"), timeout=10, what="iperf3 server")
                res = subprocess.run(["ip", "netns", "exec", NS[0], "iperf3", "-c", ADDR[1], "-u", "-b",
                                      str(int(kpps * 1e3 * size * 8)), "-l", str(size), "-t", str(args.duration), "--json"],
                                     capture_output=True, text=True, timeout=args.duration + 30)
                doc = json.loads(res.stdout or "{}")
            finally:
                server.terminate()
                server.wait(timeout=10)
            proc.check_alive()
            row = {"payload_bytes": size, "offer_kpps": kpps, **received_rate(doc, args.duration)}
            rows.append(row)
            console.print(f"payload {size:5d} B: forwarded {row['forwarded_pps'] / 1e3:7.1f} kpps "
                          f"{row['forwarded_mbps']:7.1f} Mbit/s (offered {row['offered_pps'] / 1e3:.1f} kpps, "
                          f"loss {row['loss']:.1%})")
    best = {}
    for r in rows:
        if r["forwarded_pps"] > best.get(r["payload_bytes"], {"forwarded_pps": -1})["forwarded_pps"]:
            best[r["payload_bytes"]] = r
    for size, r in best.items() if not args.json else ():
        out.print(f"[bold]fabric.p4 forwarding rate, {size} B payload: {r['forwarded_pps'] / 1e3:.1f} kpps "
                  f"({r['forwarded_mbps']:.0f} Mbit/s)[/bold]")
    result = {"program": "fabric.p4", "binary": Path(proc.binary).name, "rows": rows,
              "best": [{"payload_bytes": k, "forwarded_kpps": v["forwarded_pps"] / 1e3,
                        "forwarded_mbps": v["forwarded_mbps"]} for k, v in best.items()],
              "anchor_kpps": 80, "note": "sender, switch and receiver share this machine's CPUs"}
    if args.json:
        print_json(result)
    return 0


def _ns(ns: str, *argv: str) -> None:
    res = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True)
    if res.returncode != 0:
        raise EmulationError(f"{' '.join(argv)} in {ns} failed: {res.stderr.strip()}")


def _ns_out(ns: str, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True).stdout
