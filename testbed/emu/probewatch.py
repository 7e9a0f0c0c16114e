"""Every counter that can show a lost probe datagram on an OVS fabric, read at once (root glue, thin).

A probe datagram from one host namespace to another on the fabric failover's replica (OVS userspace
switches, ``datapath_type=netdev``, under the fabric controller; tc HTB links, no link nodes) can be lost:

    sender's link queue (HTB)         Udp SndbufErrors in the sender's namespace (UDP counts the qdisc's
                                      refusal there and returns no error: no IP_RECVERR)
    host veth -> switch port          the CPU backlog / veth: rx/tx dropped of the host's interface
    ovs-vswitchd's port socket        sk_drops (``ss -0 -m``: :func:`testbed.emu.ovsloss.port_socket_drops`)
    the datapath                      lost upcalls (``dpctl/show``), coverage ``datapath_drop_*`` and
                                      ``drop_action_*`` but the tables' own
    the OpenFlow tables               IPv4 packets of datapath flows whose action is drop (``dpctl/dump-flows``):
                                      a route not installed (a table miss drops, controllers/ofrules.py).
                                      Not coverage's ``drop_action_of_pipeline``: it counts the replica's
                                      IPv6 ND/MLD frames too (48 in a pre-cut window without a probe lost)
    ovs-vswitchd's send socket        counted nowhere (testbed.emu.ovsloss): left unattributed
    switch port's link queue (HTB)    tc qdisc drops
    switch port veth -> host          rx/tx dropped of the switch port and the host's interface
    receiver's socket                 Udp RcvbufErrors in the receiving namespace

:func:`snapshot` reads them (the hosts' /proc through their shells' pids, the machine's counters on
threads at once, so a read sits close to its moment); :func:`testbed.routing.precut.counter_causes` sets
two against each other.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from testbed.emu.ovsloss import port_socket_drops

#: coverage counters of a frame the datapath dropped other than by the OpenFlow tables' own decision
DATAPATH_DROP = re.compile(r"^(datapath_drop_\w+|drop_action_(?!of_pipeline)\w+)$")


def snmp_udp(text: str) -> dict:
    """``{"rcvbuf_errors", "sndbuf_errors"}`` of /proc/net/snmp text (the Udp row; 0 when absent)."""
    rows = [ln.split() for ln in text.splitlines() if ln.startswith("Udp:")]
    head, vals = (rows[0], rows[1]) if len(rows) >= 2 else ([], [])

    def get(field):
        return int(vals[head.index(field)]) if field in head else 0

    return {"rcvbuf_errors": get("RcvbufErrors"), "sndbuf_errors": get("SndbufErrors")}


def netdev_drops(text: str) -> int:
    """rx + tx drops of every interface but lo in /proc/net/dev text."""
    total = 0
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        cols = rest.split()
        if name.strip() not in ("", "lo") and len(cols) >= 12:
            total += int(cols[3]) + int(cols[11])
    return total


def coverage_totals(text: str) -> dict:
    """``{counter: total}`` of ``ovs-appctl coverage/show`` (each line ``name ... total: N``)."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s.*?total:\s*(\d+)\s*$", text, re.M)}


def ipv4_dropped(dump_text: str) -> dict:
    """``{match: packets}`` of the IPv4 datapath flows whose action is drop in ``ovs-appctl dpctl/dump-flows``
    (one flow a line, ``<match>, packets:N, bytes:B, used:T, actions:drop``). Only probes are IPv4 on the
    fabric while they run (ARP goes to the controller), so these are probes the OpenFlow tables dropped."""
    out = {}
    for line in dump_text.splitlines():
        match, sep, rest = line.partition(", packets:")
        if not sep or "eth_type(0x0800)" not in match or not re.search(r"actions:drop\s*$", rest):
            continue
        out[match.strip()] = out.get(match.strip(), 0) + int(rest.split(",", 1)[0])
    return out


def upcalls_lost(dpctl_text: str) -> int:
    """``lost:`` of ``ovs-appctl dpctl/show`` (packets the datapath dropped on the way to the slow path)."""
    return sum(int(m) for m in re.findall(r"\blost:(\d+)", dpctl_text or ""))


def switch_drops(link_json: str, qdisc_json: str, ports) -> dict:
    """``{"if_drops", "queue_drops"}`` of ``ports`` (``ip -s -j link show``, ``tc -s -j qdisc show``: root
    qdiscs, whose drops include their classes')."""
    want = set(ports)
    ifd = qd = 0
    for link in json.loads(link_json or "[]"):
        if link.get("ifname") in want:
            st = link.get("stats64") or link.get("stats") or {}
            ifd += int(st.get("rx", {}).get("dropped", 0)) + int(st.get("tx", {}).get("dropped", 0))
    for q in json.loads(qdisc_json or "[]"):
        if q.get("root") and q.get("dev") in want:
            qd += int(q.get("drops", 0))
    return {"if_drops": ifd, "queue_drops": qd}


def machine_counters(texts: dict, ports, pid: int | None) -> dict:
    """The machine's share of a snapshot from the commands' output (``texts``: ``link``, ``qdisc``, ``ss``,
    ``dpctl``, ``coverage``, ``flows``; keys as :data:`COMMANDS`)."""
    cov = coverage_totals(texts["coverage"])
    sw = switch_drops(texts["link"], texts["qdisc"], ports)
    return {"switch_if_drops": sw["if_drops"], "switch_queue_drops": sw["queue_drops"],
            "ovs_port_sockets": sum(port_socket_drops(texts["ss"], pid, ports).values()) if pid else 0,
            "ovs_datapath": upcalls_lost(texts["dpctl"]) + sum(v for k, v in cov.items() if DATAPATH_DROP.match(k)),
            "ovs_drop_flows": ipv4_dropped(texts["flows"])}


#: what :func:`snapshot` runs in the machine's namespace (the switch ports and ovs-vswitchd live there)
COMMANDS = {"link": ["ip", "-s", "-j", "link", "show"], "qdisc": ["tc", "-s", "-j", "qdisc", "show"],
            "ss": ["ss", "-0", "-m", "-p", "-H"], "dpctl": ["ovs-appctl", "dpctl/show", "-s"],
            "coverage": ["ovs-appctl", "coverage/show"], "flows": ["ovs-appctl", "dpctl/dump-flows"]}


def snapshot(rep, hosts, ports) -> dict:
    """Every counter above, now (root): ``{"t": (start, end), "hosts": {h: {"rcvbuf_errors",
    "sndbuf_errors", "if_drops"}}, "switch_if_drops", "switch_queue_drops", "ovs_port_sockets",
    "ovs_datapath", "ovs_drop_flows"}``. ``ports``: every switch port of the replica."""
    from testbed.emu.health import ovs_pid

    def run(cmd):
        return subprocess.run(cmd, capture_output=True, text=True).stdout

    def proc(h, name):
        with open(f"/proc/{rep.host(h).pid}/net/{name}") as f:
            return f.read()

    start = time.time()
    pid = ovs_pid()
    with ThreadPoolExecutor(len(COMMANDS)) as pool:
        futures = {k: pool.submit(run, cmd) for k, cmd in COMMANDS.items()}
        host_doc = {h: {**snmp_udp(proc(h, "snmp")), "if_drops": netdev_drops(proc(h, "dev"))} for h in hosts}
        texts = {k: f.result() for k, f in futures.items()}
    return {"t": (start, time.time()), "hosts": host_doc, **machine_counters(texts, ports, pid)}
