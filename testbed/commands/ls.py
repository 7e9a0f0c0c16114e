"""``testbed ls [--nodes] [--json]``: what runs on this machine: the replica ``testbed up`` keeps up, and every
run recorded in the run registry (scenarios, benchmarks, tests) with whether its process is alive.
"""

from __future__ import annotations

from rich.table import Table

from testbed.console import out, print_json


def register(sub) -> None:
    parser = sub.add_parser("ls", help="the running replica and every recorded testbed run", description=__doc__)
    parser.add_argument("--nodes", action="store_true", help="also list the replica's nodes")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(func=_ls)


def _ls(args) -> int:
    from testbed.emu import session
    from testbed.emu.registry import load_runs

    replica = session.read()
    runs = [{"run_id": r.get("run_id"), "name": r.get("name"), "pid": (r.get("owner") or {}).get("pid"),
             "alive": r["alive"], "objects": len(r.get("objects", [])), "created": r.get("created")}
            for r in load_runs()]
    if args.json:
        print_json({"replica": replica, "runs": runs})
        return 0
    if replica is None:
        out.print("no replica is up (`sudo testbed up SPEC`)")
    else:
        hosts = sum(1 for n in replica["nodes"].values() if n["kind"] == "host")
        out.print(f"replica [bold]{replica['name']}[/bold] (spec {replica['spec']}, scale {replica['scale']:g}): "
                  f"{hosts} hosts, {len(replica['nodes']) - hosts} switches, {len(replica['links'])} links; "
                  f"pid {replica['pid']}, up since {replica['started']}; logs in {replica['out_dir']}")
        if args.nodes:
            for name, n in sorted(replica["nodes"].items()):
                out.print(f"  {name:12s} {n['kind']:8s} {n['ip'] or '':16s} pid {n['pid']}")
    if runs:
        table = Table(title="recorded runs", title_justify="left")
        for col in ("run", "name", "pid", "alive", "objects", "since"):
            table.add_column(col)
        for r in runs:
            table.add_row(r["run_id"], r["name"], str(r["pid"]), "yes" if r["alive"] else "[red]no: "
                          "`sudo testbed clean`[/red]", str(r["objects"]), r["created"] or "?")
        out.print(table)
    return 0
