"""``testbed roce check CAPTURE.pcap [--json]``: validate RoCEv2 traffic in a capture, per QP.

Exit status 0 when the capture shows no protocol violation and no bad ICRC, 1 otherwise.
"""

from __future__ import annotations

from rich.table import Table

from testbed.cli import add_verbs
from testbed.console import console, print_json
from testbed.units import parse_duration


def register(sub) -> None:
    parser = sub.add_parser("roce", help="RoCEv2 on the wire: capture validator", description=__doc__)
    verbs = add_verbs(parser)
    check = verbs.add_parser("check", help="validate a pcap/pcapng capture per QP",
                             description=__doc__)
    check.add_argument("capture", metavar="CAPTURE.pcap")
    check.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    check.add_argument("--cnp-interval", default="50us",
                       help="notification point's CNP interval, dilated (default 50us; 0 = no rate check)")
    check.add_argument("--no-ect", action="store_true",
                       help="do not require ECN-capable data packets (captures without ECN)")
    check.set_defaults(func=_check)


def _check(args) -> int:
    from testbed.roce.check import check_capture, passed

    interval = parse_duration(args.cnp_interval, "--cnp-interval")
    report = check_capture(args.capture, cnp_interval=interval, require_ect=not args.no_ect)
    ok = passed(report)
    if args.json:
        print_json(report)
    else:
        _print(report, ok)
    return 0 if ok else 1


def _print(report: dict, ok: bool) -> None:
    console.print(f"{report['packets']} packets, {report['roce_packets']} RoCEv2, "
                  f"{report['malformed']} malformed, {report['truncated']} truncated, "
                  f"{report['icrc_bad']} bad ICRC, {report['cnp']} CNPs")
    table = Table("src", "dst", "dest QP", "pkts", "retx", "ACK", "NAK", "CE", "CNP", "msgs", "bytes")
    for q in report["qps"]:
        table.add_row(q["src"], q["dst"], f"0x{q['dqpn']:06x}", str(q["packets"]), str(q["retransmissions"]),
                      str(q["acks"]), str(q["naks"]), str(q["ce_marked"]), str(q["cnps"]), str(q["messages"]),
                      str(q["message_bytes"]))
    console.print(table)
    for v in report["violations"]:
        console.print(f"[red]violation[/red] {v['qp']} psn {v['psn']}: {v['what']}")
    if report["violation_count"] > len(report["violations"]):
        console.print(f"... {report['violation_count'] - len(report['violations'])} more violations")
    console.print("[green]OK[/green]" if ok else "[red]FAILED[/red]")
