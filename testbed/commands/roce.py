"""``testbed roce check CAPTURE.pcap [--json]``: validate RoCEv2 traffic in a capture, per QP.

Exit status 0 when the capture passes, 1 when it shows a protocol violation, a bad ICRC, a malformed
RoCE packet (unless --allow-malformed), a corrupt file (idem) or no RoCE at all (unless --allow-empty);
2 for a file that is not a capture. Data without an ECN-capable codepoint is a violation only with
--expect-ect (the testbed's DCQCN runs send ECT(0); many stacks send Not-ECT by default). A capture
stopped at a packet count (``tcpdump -c N``) is checked with --cut-at N: holding N packets, it may end
inside a message.
"""

from __future__ import annotations

import os
import sys

from rich.table import Table

from testbed.cli import add_verbs
from testbed.console import out, print_json
from testbed.errors import UsageError
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
    check.add_argument("--expect-ect", action="store_true",
                       help="data packets must be ECN-capable (ECT(0)/ECT(1)); off by default")
    check.add_argument("--allow-malformed", action="store_true",
                       help="do not fail on malformed RoCE packets or a corrupt capture file")
    check.add_argument("--allow-empty", action="store_true", help="do not fail a capture without RoCE")
    check.add_argument("--cut-at", type=int, metavar="N",
                       help="the capture was stopped at N packets (tcpdump -c N): if it holds N, a message "
                            "open at its end is no violation")
    check.set_defaults(func=_check)


def _check(args) -> int:
    from testbed.roce.check import check_capture, failures

    interval = parse_duration(args.cnp_interval, "--cnp-interval")
    if args.cut_at is not None and args.cut_at < 1:
        raise UsageError(f"--cut-at: must be the positive packet count given to tcpdump -c, got {args.cut_at}")
    report = check_capture(args.capture, cnp_interval=interval, require_ect=args.expect_ect, cut_at=args.cut_at)
    why = failures(report, allow_malformed=args.allow_malformed, allow_empty=args.allow_empty)
    report["passed"] = not why
    report["failures"] = why
    try:
        if args.json:
            print_json(report)
        else:
            _print(report, why)
    except BrokenPipeError:
        _quiet_pipe()
    return 0 if not why else 1


def _quiet_pipe() -> None:
    """The reader went away (``| head``): stop writing, and let nothing complain at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    os.close(devnull)


def _print(report: dict, why: list[str]) -> None:
    out.print(f"{report['packets']} packets, {report['roce_packets']} RoCEv2, "
                  f"{report['malformed']} malformed, {report['truncated']} truncated, "
                  f"{report['icrc_bad']} bad ICRC, {report['cnp']} CNPs")
    if report["cut"]:
        out.print(f"stopped at its packet count (--cut-at): {report['open_at_end']} QPs end inside a message")
    table = Table("src", "dst", "dest QP", "pkts", "retx", "reord", "dup", "ACK", "NAK", "READ rsp", "CE",
                  "CNP", "msgs", "bytes")
    for q in report["qps"]:
        dqp = f"0x{q['dqpn']:06x}" + (f" (UD from 0x{q['srcqp']:06x})" if q["srcqp"] is not None else "")
        table.add_row(q["src"], q["dst"], dqp, str(q["packets"]), str(q["retransmissions"]),
                      str(q["reordered"]), str(q["duplicates"]), str(q["acks"]), str(q["naks"]),
                      str(q["read_responses"]), str(q["ce_marked"]), str(q["cnps"]), str(q["messages"]),
                      str(q["message_bytes"]))
    out.print(table)
    for v in report["violations"]:
        out.print(f"[red]violation[/red] {v['qp']} psn {v['psn']}: {v['what']}", markup=True)
    if report["violation_count"] > len(report["violations"]):
        out.print(f"... {report['violation_count'] - len(report['violations'])} more violations")
    for line in why:
        out.print(f"[red]fails:[/red] {line}")
    out.print("[green]OK[/green]" if not why else "[red]FAILED[/red]")
