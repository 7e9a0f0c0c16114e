"""``testbed rdma server|write-bw|send-bw|write-lat|read-bw|read-lat|atomic-bw``: perftest-like tests
over soft RDMA (RoCEv2 in user space, UDP port 4791), runnable inside replica hosts (``mnexec -a PID`` /
``ip netns exec``).

    testbed rdma server [--once]                       # on the target host
    testbed rdma write-bw HOST --size 64KB --iters 1000 [--verify] [--json]
    testbed rdma read-bw HOST --size 64KB --qps 4 --duration 5s --verify
    testbed rdma send-bw HOST --connection UD --size 1KB
    testbed rdma write-bw HOST --size 1MB --duration 10s --dcqcn --line-rate 100G --scale 1000

The server listens on every address inside a network namespace of its own (a replica host, an
``ip netns exec``), on 127.0.0.1 in the machine's own namespace; ``--bind ADDR`` overrides both.
"""

from __future__ import annotations

import json
from pathlib import Path

from testbed.cli import add_verbs, bind_port
from testbed.console import out, print_json
from testbed.dilation import Dilation
from testbed.errors import SpecError, UsageError
from testbed.units import parse_duration, parse_rate, parse_size


def register(sub) -> None:
    parser = sub.add_parser("rdma", help="soft-RDMA perftest: server, write/send/read/atomic bw, write/read lat",
                            description=__doc__)
    verbs = add_verbs(parser)
    server = verbs.add_parser("server", help="answer perftest clients (like ib_write_bw without a host)")
    server.add_argument("--bind", default=None,
                        help="address for the TCP exchange (default: all addresses in a network namespace of "
                             "its own, e.g. a replica host or 'ip netns exec'; 127.0.0.1 in the machine's own)")
    _ports(server)
    server.add_argument("--once", action="store_true", help="exit after one client")
    server.add_argument("--json", action="store_true", help="print the served results as JSON")
    server.set_defaults(func=_server)
    for name, test in (("write-bw", "write_bw"), ("send-bw", "send_bw"), ("write-lat", "write_lat"),
                       ("read-bw", "read_bw"), ("read-lat", "read_lat"), ("atomic-bw", "atomic_bw")):
        p = verbs.add_parser(name, help=f"{test.replace('_', ' ')} test against a server",
                             description=__doc__)
        p.add_argument("host", metavar="HOST", help="address of the host running 'testbed rdma server'")
        default_size = {"write_lat": "2B", "read_lat": "2B", "atomic_bw": "8B"}.get(test, "64KB")
        p.add_argument("--size", default=default_size, help=f"message size (default {default_size})")
        p.add_argument("--qps", "-q", type=int, default=1, help="queue pairs, work spread round-robin (perftest -q)")
        p.add_argument("--connection", "-c", default="RC", type=str.upper, choices=("RC", "UC", "UD"),
                       help="transport (perftest -c): RC for every test, UC for write/send, UD for send")
        group = p.add_mutually_exclusive_group()
        group.add_argument("--iters", type=int, help="messages to send (default 1000)")
        group.add_argument("--duration", help="run for this long instead (e.g. 10s)")
        p.add_argument("--mtu", type=int, default=1024, help="IB path MTU: 256..4096 (default 1024)")
        p.add_argument("--window", type=int, default=128, help="unacknowledged packets in flight")
        p.add_argument("--tx-depth", type=int, default=16, help="work requests in flight")
        p.add_argument("--timeout", default="50ms", help="local ACK timeout (dilated with --scale)")
        p.add_argument("--retry", type=int, default=7, help="retry limit before the QP errors out")
        p.add_argument("--reorder", type=int, default=32,
                       help="early packets the responder holds before NAKing a gap (0: strict IB)")
        p.add_argument("--dcqcn", action="store_true", help="rate-limit with DCQCN (ECN -> CNP)")
        p.add_argument("--line-rate", default="100G", help="real-fabric line rate for DCQCN (default 100G)")
        p.add_argument("--scale", type=float, default=1.0, help="replica time-dilation factor")
        p.add_argument("--loss", default="0", help="drop this share of datagrams at both ends (e.g. 1%%)")
        p.add_argument("--verify", action="store_true", help="check the target region byte by byte")
        p.add_argument("--series", metavar="FILE", help="write the QP's rate/alpha/CNP series (.json/.csv)")
        p.add_argument("--wait", default="0s", help="keep trying to reach a starting server this long")
        p.add_argument("--bind", metavar="ADDR", help="local address to use (multi-homed hosts)")
        _ports(p)
        p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
        if test == "atomic_bw":
            _atomic_arg(p)
        p.set_defaults(func=_client, test=test)
    _pingpong_parser(verbs)
    _perftest_parser(verbs)


def _perftest_parser(verbs) -> None:
    p = verbs.add_parser("perftest-server",
                         help="be the server of rdma-core's ib_write_bw/ib_read_bw/ib_send_bw/ib_atomic_bw",
                         description="Speak perftest 6.06's TCP control protocol (Debian 12's perftest) on port "
                                     "18515 and serve one ib_{write,read,send,atomic}_bw client (RC, half duplex) "
                                     "with the soft-RDMA endpoint; prints the client's bandwidth report.")
    p.add_argument("--verb", choices=PERFTEST_VERBS, default="write", help="the client's test")
    p.add_argument("-s", "--size", default="65536", help="message size, as the client's -s (default 65536)")
    p.add_argument("-q", "--qps", type=int, default=1, help="QPs, as the client's -q (default 1)")
    p.add_argument("-m", "--mtu", type=int, default=1024, help="largest path MTU to agree on (default 1024)")
    p.add_argument("-p", "--port", type=bind_port, default=18515, help="TCP port (default 18515)")
    p.add_argument("--bind", metavar="ADDR", help="listen address (default: see 'testbed rdma server')")
    p.add_argument("--timeout", default="300s", help="give up when the test has not ended after this long")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=_perftest)
    c = verbs.add_parser("perftest-client", help="be the client of ib_write_bw/ib_read_bw/ib_send_bw/ib_atomic_bw",
                         description="Run ib_{write,read,send,atomic}_bw's test (RC, half duplex) against a perftest "
                                     "server (rdma-core's tool without a host, e.g. on kernel rxe, or 'testbed rdma "
                                     "perftest-server') over perftest 6.06's TCP control protocol.")
    c.add_argument("host", metavar="HOST", help="the perftest server")
    c.add_argument("--verb", choices=PERFTEST_VERBS, default="write", help="the test, as the server's (default write)")
    c.add_argument("-s", "--size", default="65536", help="message size (default 65536; atomics: 8)")
    c.add_argument("-q", "--qps", type=int, default=1, help="QPs (default 1)")
    c.add_argument("-n", "--iters", type=int, default=1000, help="messages per QP, as perftest's -n (default 1000)")
    _atomic_arg(c)
    c.add_argument("-t", "--tx-depth", type=int, default=128, help="work requests outstanding per QP (default 128)")
    c.add_argument("-m", "--mtu", type=int, default=1024, help="largest path MTU to agree on (default 1024)")
    c.add_argument("-u", "--qp-timeout", type=int, default=14,
                   help="local ACK timeout 4.096 us x 2^N, as perftest's -u (default 14: 67 ms)")
    c.add_argument("-p", "--port", type=bind_port, default=18515, help="TCP port (default 18515)")
    c.add_argument("--wait", default="0s", help="keep trying to reach a starting server this long")
    c.add_argument("--timeout", default="300s", help="give up when the test has not ended after this long")
    c.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    c.set_defaults(func=_perftest_client)


PERFTEST_VERBS = ("write", "read", "send", "atomic")
#: perftest's -A names -> the endpoint's atomic ops
ATOMIC_NAMES = {"FETCH_AND_ADD": "faa", "CMP_AND_SWAP": "cas"}


def _atomic_arg(p) -> None:
    p.add_argument("-A", "--atomic", type=str.upper, choices=tuple(ATOMIC_NAMES), default="FETCH_AND_ADD",
                   help="atomic operation, as perftest's -A (default FETCH_AND_ADD)")


def _perftest_client(args) -> int:
    from testbed.rdma.perftest_client import perftest_client, report_text
    from testbed.rdma.qp import QpConfig
    from testbed.rdma.verbs import RdmaError

    size = int(parse_size(args.size, "--size"))
    for field, value, high in (("--size", size, (1 << 31) - 1), ("--qps", args.qps, 64),
                               ("--iters", args.iters, (1 << 32) - 1), ("--tx-depth", args.tx_depth, 8192),
                               ("--qp-timeout", args.qp_timeout, 31)):
        if not 1 <= value <= high:
            raise SpecError(field, f"must be 1..{high}, got {value}")
    try:
        cfg = QpConfig(mtu=args.mtu, timeout=4.096e-6 * 2 ** args.qp_timeout)
    except RdmaError as exc:
        raise UsageError(str(exc)) from exc
    r = perftest_client(args.host, args.verb, size, args.qps, args.iters, args.port, cfg,
                        atomic=ATOMIC_NAMES[args.atomic], tx_depth=args.tx_depth,
                        connect_wait=parse_duration(args.wait, "--wait"),
                        timeout=parse_duration(args.timeout, "--timeout"))
    if args.json:
        print_json(r)
    else:
        out.print(report_text(r), markup=False)
    ok = r["done"] and all(s == "rts" for s in r["qp_states"]) and r.get("atomic_in_order", True)
    return 0 if ok else 1


def _perftest(args) -> int:
    from testbed.rdma.perftest import report_text, serve_perftest
    from testbed.rdma.qp import QpConfig
    from testbed.rdma.verbs import RdmaError

    size = int(parse_size(args.size, "--size"))
    if size < 1:
        raise SpecError("--size", "must be >= 1")
    if not 1 <= args.qps <= 64:
        raise SpecError("--qps", "must be 1..64")
    try:
        cfg = QpConfig(mtu=args.mtu)
    except RdmaError as exc:
        raise UsageError(str(exc)) from exc
    r = serve_perftest(args.verb, size, args.qps, args.bind, args.port, cfg,
                       timeout=parse_duration(args.timeout, "--timeout"))
    if args.json:
        print_json(r)
    else:
        out.print(report_text(r), markup=False)
    return 0 if r["done"] and not r["completion_errors"] and all(s == "rts" for s in r["qp_states"]) else 1


def _pingpong_parser(verbs) -> None:
    for transport in ("rc", "uc", "ud"):
        _pingpong_parser_of(verbs, transport)


def _pingpong_parser_of(verbs, transport: str) -> None:
    tool = f"ibv_{transport}_pingpong"
    ud = transport == "ud"
    p = verbs.add_parser(f"{transport}-pingpong", help=f"{tool}'s protocol: server without HOST, client with it",
                         description=f"Speak rdma-core's {tool} (TCP 18515 records LID:QPN:PSN:GID, then a "
                                     f"{transport.upper()} SEND ping-pong) so either side can be the real tool on a "
                                     "kernel rxe host.")
    default = "1024" if ud else "4096"
    p.add_argument("host", metavar="HOST", nargs="?", help="server to connect to (omit to be the server)")
    p.add_argument("-p", "--port", type=bind_port, default=18515, help="TCP port (default 18515)")
    p.add_argument("-s", "--size", default=default,
                   help=f"message size (default {default}" + ("; at most the MTU)" if ud else ")"))
    p.add_argument("-n", "--iters", type=int, default=1000, help="exchanges (default 1000)")
    p.add_argument("-r", "--rx-depth", type=int, default=500, help="receives posted (default 500)")
    p.add_argument("-m", "--mtu", type=int, default=1024, help="path MTU (default 1024)")
    p.add_argument("-c", "--chk", action="store_true",
                   help="client: zero each page's first byte as the tool's --chk does; server: expect that")
    p.add_argument("--bind", metavar="ADDR", help="server: listen address (default: see 'testbed rdma server')")
    p.add_argument("--wait", default="0s", help="client: keep trying to reach a starting server this long")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=_pingpong, transport=transport)


def _pingpong(args) -> int:
    from testbed.rdma.pingpong import pingpong_client, report_text, serve_pingpong
    from testbed.rdma.qp import QpConfig
    from testbed.rdma.verbs import RdmaError

    size = int(parse_size(args.size, "--size"))
    if args.iters < 1 or args.rx_depth < 1:
        raise SpecError("--iters" if args.iters < 1 else "--rx-depth", "must be >= 1")
    try:
        cfg = QpConfig(mtu=args.mtu)
    except RdmaError as exc:
        raise UsageError(str(exc)) from exc
    if args.transport == "ud" and size > args.mtu:
        raise SpecError("--size", f"a UD message is one packet: at most the MTU ({args.mtu}), got {size}")
    if args.host:
        r = pingpong_client(args.host, args.port, size, args.iters, args.rx_depth, args.chk, cfg,
                            connect_wait=parse_duration(args.wait, "--wait"), transport=args.transport)
    else:
        r = serve_pingpong(args.bind, args.port, size, args.iters, args.rx_depth, cfg, chk=args.chk,
                           transport=args.transport)
    if args.json:
        print_json(r)
    else:
        out.print(report_text(r), markup=False)
    return 0 if r["verified"] else 1


def _ports(p) -> None:
    from testbed.rdma.oob import DEFAULT_PORT
    from testbed.roce.opcodes import ROCE_UDP_PORT

    p.add_argument("--port", type=bind_port, default=DEFAULT_PORT, help=f"TCP exchange port (default {DEFAULT_PORT})")
    p.add_argument("--roce-port", type=bind_port, default=ROCE_UDP_PORT,
                   help=f"UDP port of the RoCE endpoint (default {ROCE_UDP_PORT})")


def parse_share(value: str, field: str) -> float:
    """``1%`` or ``0.01`` -> 0.01, within [0, 1)."""
    text = str(value).strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise SpecError(field, f"expected a share such as 1% or 0.01, got {value!r}") from None
    if not 0 <= share < 1:
        raise SpecError(field, f"must be in [0, 1), got {value!r}")
    return share


def _server(args) -> int:
    from testbed.rdma.perf import serve

    results = serve(args.bind, args.port, args.roce_port, once=args.once)
    if args.json:
        print_json(results)
    return 0


def _client(args) -> int:
    from testbed.rdma.dcqcn import DcqcnParams
    from testbed.rdma.perf import check_test, report_text, run_client
    from testbed.rdma.qp import QpConfig
    from testbed.rdma.verbs import RdmaError

    size = int(parse_size(args.size, "--size"))
    duration = parse_duration(args.duration, "--duration") if args.duration else None
    if args.iters is not None and args.iters < 1:
        raise SpecError("--iters", f"must be >= 1, got {args.iters}")
    dilation = Dilation(args.scale)
    dcqcn = DcqcnParams(line_rate=parse_rate(args.line_rate, "--line-rate")).dilated(dilation) if args.dcqcn \
        else None
    try:
        cfg = QpConfig(mtu=args.mtu, window=args.window, timeout=dilation.time(parse_duration(args.timeout, "--timeout")),
                       retry_limit=args.retry, dcqcn=dcqcn, loss=parse_share(args.loss, "--loss"),
                       reorder=args.reorder)
        check_test(args.test, args.connection.lower(), args.qps, size, args.mtu)
    except RdmaError as exc:
        raise UsageError(str(exc)) from exc
    result = run_client(args.host, args.test, size, iters=args.iters, duration=duration, port=args.port,
                        roce_port=args.roce_port, config=cfg, verify=args.verify, tx_depth=args.tx_depth,
                        series_every=1e-3 * args.scale if args.series else None,
                        connect_wait=parse_duration(args.wait, "--wait"), source=args.bind, qps=args.qps,
                        transport=args.connection.lower(),
                        atomic=ATOMIC_NAMES[getattr(args, "atomic", "FETCH_AND_ADD")])
    if args.series:
        _write_series(Path(args.series), result)
    if args.json:
        print_json(result)
    else:
        out.print(report_text(result), markup=False)
    return 0 if result.get("verified", True) else 1


def _write_series(path: Path, result: dict) -> None:
    series = result.get("series")
    if series is None:
        return
    if path.suffix == ".csv":
        cols = series["columns"]
        lines = [",".join(cols)] + [",".join("" if v is None else str(v) for v in row) for row in series["rows"]]
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text(json.dumps(series))
