"""``testbed controller status [--json]``: the fabric controller of the running replica.

Found through the run registry (or ``--api-port``). Shows health, switches connected, links down,
LLDP mismatches with the graph and the failover events with timestamps; ``--paths SRC DST`` adds the paths
packets between two hosts take now.
"""

from __future__ import annotations

import datetime as _dt

from testbed.cli import add_verbs, port
from testbed.console import out, print_json
from testbed.errors import EmulationError


def register(sub) -> None:
    parser = sub.add_parser("controller", help="status of the running fabric controller", description=__doc__)
    verbs = add_verbs(parser)
    status = verbs.add_parser("status", help="health, topology as seen, failover events")
    status.add_argument("--api-port", type=port, help="controller API port (default: from the run registry)")
    status.add_argument("--paths", nargs=2, metavar=("SRC", "DST"), help="also show the paths SRC -> DST")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)


def _status(args) -> int:
    from controllers.launch import ApiError, find_controller

    client = find_controller(args.api_port)
    try:
        doc = {"api": client.url, "health": client.get("/health"), "events": client.get("/events")}
        topo = client.get("/topology")
        doc["links_down"] = [[link["a"], link["b"]] for link in topo["links"] if not link["up"]]
        doc["lldp_mismatches"] = topo["lldp_mismatches"]
        if args.paths:
            doc["paths"] = client.get("/paths", src=args.paths[0], dst=args.paths[1])
    except ApiError as exc:
        raise EmulationError(str(exc)) from None
    if args.json:
        print_json(doc)
        return 0
    h = doc["health"]
    out.print(f"controller {client.url}: {h['status']}, mode {h['mode']}, "
                  f"{h['switches_connected']}/{h['switches_expected']} switches, {h['routes']} routes, "
                  f"up {h['uptime_s']:.0f} s")
    out.print(f"packet-ins {h['packet_ins']} (ARP replies {h['arp_replies']}, malformed {h['malformed']}), "
                  f"handler errors {h['handler_errors']}, unknown datapaths {h['unknown_datapaths'] or 'none'}")
    out.print(f"links down: {', '.join('-'.join(x) for x in doc['links_down']) or 'none'}; "
                  f"LLDP mismatches: {len(doc['lldp_mismatches'])}")
    for ev in doc["events"]["failovers"][-20:]:
        stamp = _dt.datetime.fromtimestamp(ev["time"]).strftime("%H:%M:%S.%f")[:-3]
        out.print(f"  {stamp} {ev['kind']} {'-'.join(ev['link'])} ({ev['cause']}): "
                      f"{ev['destinations_recomputed']} destinations, {ev['messages']} messages, "
                      f"computed in {ev['compute_ms']:.2f} ms")
    if args.paths:
        p = doc["paths"]
        out.print(f"paths {p['src']} -> {p['dst']}: {p['equal_cost']}")
        for path in p["paths"]:
            out.print("  " + " ".join(path))
    return 0
