"""``testbed clean [--json] [--dry-run] [--force]``: remove what crashed runs left behind, and only that.

Unlike ``mn -c`` (which deletes every bridge and kills every controller on the machine), this removes
exactly the objects recorded in the run registry (``/run/scaleout-testbed/runs``) of runs whose process
is gone: their processes (checked by start time), OVS bridges (by uuid), interfaces (by ifindex) and
namespaces.  Live runs are left alone unless ``--force``. It also removes the temporary folders of test
VM groups (``/tmp/scaleout-vm-*``) whose owning process is gone, and puts back the kernel settings a dead
run changed (the softirq threads' priority, expedited RCU, ovs-vswitchd's send buffer: each saved with its
owner).
"""

from __future__ import annotations

from testbed.console import out, print_json, require_root


def register(sub) -> None:
    parser = sub.add_parser("clean", help="remove the recorded leftovers of dead testbed runs",
                            description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON report on stdout")
    parser.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    parser.add_argument("--force", action="store_true", help="also remove the objects of runs still alive")
    parser.set_defaults(func=_clean)


def _clean(args) -> int:
    require_root("testbed clean")
    from testbed.emu.registry import clean
    from testbed.emu.vm import remove_stale_dirs

    reports = clean(force=args.force, dry_run=args.dry_run)
    vm_dirs = remove_stale_dirs(dry_run=args.dry_run)
    failed = any(r["failed"] for r in reports)
    if args.json:  # exactly one JSON document on stdout, nothing else
        print_json({"dry_run": args.dry_run, "runs": reports,
                    "vm_dirs": [{"path": str(d), "why": why} for d, why in vm_dirs]})
        return 1 if failed else 0
    verb = "would remove" if args.dry_run else "removed"
    for d, why in vm_dirs:
        out.print(f"{verb} VM folder {d} ({why})")
    if not reports:
        out.print("nothing to clean: no recorded runs")
    for r in reports:
        if r["skipped"]:
            out.print(f"{r['run_id']}: still running, left alone (--force to remove its objects)")
            continue
        out.print(f"{r['run_id']}: {verb} {len(r['removed'])} objects, {len(r['gone'])} already gone"
                      + (f", [red]{len(r['failed'])} failed[/red]" if r["failed"] else ""))
        for desc in r["removed"]:
            out.print(f"  {verb} {desc}")
        for desc in r["kept"]:
            out.print(f"  [yellow]kept {desc}[/yellow]")
        for desc in r["failed"]:
            out.print(f"  [red]failed: {desc}[/red]")
    return 1 if failed else 0
