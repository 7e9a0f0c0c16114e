"""``testbed doctor [--json]``: what this machine can emulate, found by trying, and the backends picked.

Run it as root: the probes create (and remove) a namespace, a veth pair, netem/RED qdiscs and OVS
bridges.  As non-root only the binaries are checked and the rest is reported as not probed.
"""

from __future__ import annotations

from rich.table import Table

from testbed.console import out, print_json


def register(sub) -> None:
    parser = sub.add_parser("doctor", help="probe this machine's capabilities and the backends picked",
                            description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.set_defaults(func=_doctor)


def _doctor(args) -> int:
    from testbed.doctor import capabilities

    report = capabilities()
    if args.json:
        print_json(report)
        return 0
    table = Table(title="capabilities", title_justify="left")
    table.add_column("capability")
    table.add_column("present")
    table.add_column("how we know")
    for name, cap in report["capabilities"].items():
        table.add_row(name, "[green]yes[/green]" if cap["present"] else "[red]no[/red]", cap["detail"])
    out.print(table)
    backends = report["backends"]
    out.print("backends: " + ", ".join(f"{k}=[bold]{v}[/bold]" for k, v in backends.items()))
    return 0
