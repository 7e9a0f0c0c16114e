"""A soft-RDMA endpoint configured by data: ``python -m testbed.rdma.endpoint serve|send CONFIG``.

Scenarios start endpoints inside replica hosts. The sender's configuration travels as a JSON document
(the plan's :class:`testbed.plan.EndpointEntry` values: emulated DCQCN constants and QP timeout), never
as Python source, and the module imports only the RDMA stack (not the whole CLI: imports cost seconds on
a busy machine)::

    python -m testbed.rdma.endpoint serve 0.0.0.0 [OOB_PORT ROCE_PORT [NIC_JSON]]   # N servers in a host: N:1
        NIC_JSON: {"rx_limit_pps": 300, "rx_buffer_bytes": 65536,
                   "nic_pfc": {"xoff_bytes": ..., "xon_bytes": ..., "refresh_s": ...}}
    python -m testbed.rdma.endpoint send '{"host": "10.0.1.1", "test": "write_lat", "size": 1048576,
        "iters": 8, "mtu": 1024, "window": 128, "timeout_s": 50.0, "dcqcn": {...emulated...}}'

``send`` prints the client's result document (JSON) on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from testbed.errors import EmulationError, SpecError
from testbed.stats import nearest_rank

SEND_KEYS = ("host", "test", "size", "iters", "mtu", "window", "timeout_s", "dcqcn", "connect_wait_s", "qpns",
             "series_every_s", "sizes", "dscp", "port", "duration_s",
             "start_at", "drain_s", "rate_limit_bps", "tx_depth", "line_burst_frames", "run_timeout_s")
#: The server's receive side (NIC_JSON): :class:`testbed.rdma.device.Device`'s keyword arguments.
NIC_KEYS = ("rx_limit_pps", "rx_buffer_bytes", "nic_pfc")


def qp_config(doc: dict):
    """The :class:`~testbed.rdma.qp.QpConfig` of a send document (emulated units, as the plan gives them)."""
    from testbed.rdma.dcqcn import DcqcnParams
    from testbed.rdma.qp import QpConfig

    unknown = sorted(set(doc) - set(SEND_KEYS))
    if unknown:
        raise SpecError(f"endpoint.{unknown[0]}", f"unknown key; allowed: {', '.join(SEND_KEYS)}")
    dcqcn = DcqcnParams(**doc["dcqcn"]) if doc.get("dcqcn") else None
    extra = {"dscp": doc["dscp"]} if "dscp" in doc else {}   # default: RoCE's (wire.ROCE_DSCP)
    if doc.get("rate_limit_bps") is not None:
        extra["rate_limit"] = doc["rate_limit_bps"]
    if doc.get("line_burst_frames") is not None:
        extra["line_burst_frames"] = doc["line_burst_frames"]
    return QpConfig(mtu=doc.get("mtu", 1024), window=doc.get("window", 128), timeout=doc["timeout_s"], dcqcn=dcqcn,
                    **extra)


def send(doc: dict) -> dict:
    from testbed.rdma.oob import DEFAULT_PORT
    from testbed.rdma.perf import run_client

    return run_client(doc["host"], doc.get("test", "write_lat"), doc["size"], iters=doc.get("iters"),
                      duration=doc.get("duration_s"), port=doc.get("port", DEFAULT_PORT), config=qp_config(doc),
                      connect_wait=doc.get("connect_wait_s", 30),
                      qpns=tuple(doc["qpns"]) if doc.get("qpns") else None, series_every=doc.get("series_every_s"),
                      sizes=tuple(doc["sizes"]) if doc.get("sizes") else None, start_at=doc.get("start_at"),
                      drain=doc.get("drain_s"), tx_depth=doc.get("tx_depth", 16),
                      **({"timeout": float(doc["run_timeout_s"])} if doc.get("run_timeout_s") else {}))


def sender_result(proc, out: Path, log: Path) -> dict:
    """The result document a ``send`` process (ended) printed into ``out``; an :class:`EmulationError`
    naming its log when it failed or printed nothing."""
    text = out.read_text() if out.exists() else ""
    if proc.returncode != 0 or not text.strip():
        raise EmulationError(f"sender failed (status {proc.returncode}); see {log}")
    return json.loads(text)


def main(argv: list[str]) -> int:
    if not (argv[:1] == ["send"] and len(argv) == 2 or argv[:1] == ["serve"] and len(argv) in (2, 4, 5)):
        print("usage: python -m testbed.rdma.endpoint serve BIND [OOB_PORT ROCE_PORT [NIC_JSON]] | send CONFIG_JSON",
              file=sys.stderr)
        return 2
    if argv[0] == "serve":
        from testbed.rdma.perf import serve

        ports = {"port": int(argv[2]), "roce_port": int(argv[3])} if len(argv) >= 4 else {}
        nic = json.loads(argv[4]) if len(argv) == 5 else None
        unknown = sorted(set(nic or {}) - set(NIC_KEYS))
        if unknown:
            raise SpecError(f"endpoint.{unknown[0]}", f"unknown key; allowed: {', '.join(NIC_KEYS)}")
        serve(argv[1], **ports, nic=nic)
        return 0
    print(json.dumps(send(json.loads(argv[1]))))
    return 0


def summarise_write_lat(results: list[dict]) -> dict:
    """Flow figures of several senders' ``write_lat`` results (pure).

    write-lat reports half round trips (perftest's convention): a message's completion time is twice that.
    With a size mix (results carrying ``message_lat_usec``), ``fct_by_size`` gives each size class's
    completion times over every sender's messages, smallest size first: [{"bytes", "messages", "fct_p50_s",
    "fct_p99_s"}] (p99 the nearest rank: with a few messages per class it is their largest); [] without a mix.
    """
    import statistics

    seconds = max(x["seconds"] for x in results)
    total = sum(x.get("bytes_total", x["bytes"] * x["iterations"]) for x in results)
    by_size: dict[int, list[float]] = {}
    for x in results:
        for size, usec in x.get("message_lat_usec", ()):
            by_size.setdefault(int(size), []).append(2 * usec * 1e-6)
    classes = [{"bytes": size, "messages": len(v), "fct_p50_s": statistics.median(v),
                "fct_p99_s": nearest_rank(v, 0.99)} for size, v in sorted(by_size.items())]
    return {"goodput_bps": total * 8 / seconds if seconds else 0.0, "fct_by_size": classes,
            "fct_p50_s": statistics.median(2 * x["t_typical_usec"] * 1e-6 for x in results),
            "fct_p99_s": max(2 * x["t_99_usec"] * 1e-6 for x in results),
            "cnps_rx": sum(x["cnps_rx"] for x in results),
            "retransmissions": sum(x["retransmissions"] for x in results),
            "receiver_naks": sum(x.get("server", {}).get("stats", {}).get("naks_tx", 0) for x in results)}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
