"""Frames lost inside Open vSwitch's userspace datapath (``datapath_type=netdev``), counted from outside it.

A frame crosses a switch of the replica like this; beside each step, what counts a loss there:

    peer veth xmit -> the CPU's netif_rx backlog       full (net.core.netdev_max_backlog): /proc/net/softnet_stat
                                                       column 2, per CPU, machine-wide (:func:`softnet_dropped`);
                                                       the sending veth counts it too, as its tx_dropped
    -> the port's AF_PACKET socket (ovs-vswitchd)     receive buffer full: the socket's sk_drops, ``ss -0 -m -p``
                                                       ``d<N>``, one socket per port (:func:`port_socket_drops`)
    -> the datapath                                    lost upcalls (dpctl/show), drop actions (coverage)
    -> ovs-vswitchd's ONE AF_PACKET send socket       send buffer full: sendmmsg fails with EAGAIN and OVS 3.1
       (every port of every bridge shares it)          frees the rest of the batch (lib/netdev-linux.c,
                                                       netdev_linux_send: no tx_dropped for a non-tap port, one
                                                       rate-limited log line); the kernel counts nothing either
    -> the port's qdisc (HTB: the modelled queue)      qdisc drops -> veth xmit to the peer (tx_dropped)

The send socket is charged for every frame until the port's HTB hands it to the veth, so the queues of all
the switch ports *together* hold at most its send buffer (net.core.wmem_default when ovs-vswitchd made
it, 212,992 B here: ~92 frames of 1 KiB MTU, truesize 2,304 B), not the 1000 packets a port's queue is
modelled with; beyond that the frames vanish. Nothing counts them, so :func:`unsent` infers them by
conservation over the replica's own switch ports: frames the ports received, less those their sockets
dropped (what ovs-vswitchd read), less those that reached the ports' queues (sent, queue drops, queue
growth). The kernel backlog's drops are read too, machine-wide (another run at the same time would add
its own: the emulation lock makes that unlikely), as a check on the veths' tx_dropped, which count them
already. Measured on an 8-rank all-to-all (docs/collectives.md): what ovs-vswitchd read equals its own
``packets received`` (pmd-stats-show), and read - queued equals the frames the hosts' interfaces sent and
never received, frame for frame. These are emulator losses, not a modelled queue's.

:func:`snapshot` (root, thin) reads what these need; :func:`losses` sets two snapshots against each other.
"""

from __future__ import annotations

import json
import re
import subprocess

#: the ledger's names of the frames lost inside ovs-vswitchd (both read on this replica's ports only)
ENTRIES = {"ovs_send_socket": "read by ovs-vswitchd and never queued (its send socket full; inferred)",
           "ovs_port_sockets": "ovs-vswitchd's port sockets full"}


def softnet_dropped(text: str) -> int:
    """Frames netif_rx refused, summed over CPUs (/proc/net/softnet_stat: one line per CPU, hex columns,
    the second is ``dropped``): a veth's xmit enqueues to the CPU's backlog, which holds at most
    net.core.netdev_max_backlog frames. Machine-wide: every namespace's veths share the CPUs' backlogs."""
    total = 0
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 2:
            total += int(cols[1], 16)
    return total


def _sockets(ss_text: str, pid: int):
    """(local address, skmem dict) of every packet socket of process ``pid`` in ``ss -0 -m -p -H`` text
    (one of its owners: a socket held by several processes lists each, as ovs-vswitchd's send socket
    does while :mod:`testbed.emu.ovssndbuf` holds a copy)."""
    for line in ss_text.splitlines():
        cols = line.split()
        owners = {int(x) for x in re.findall(r"pid=(\d+),", line)}
        mem = re.search(r"skmem:\(([^)]*)\)", line)
        if len(cols) < 4 or not mem or pid not in owners:
            continue
        skmem = {m.group(1): int(m.group(2)) for m in re.finditer(r"([a-z]+)(\d+)", mem.group(1))}
        yield cols[3], skmem


def port_socket_drops(ss_text: str, pid: int, ports) -> dict:
    """``{port: frames dropped}`` by ovs-vswitchd's (``pid``) receive sockets of ``ports``: each is bound to
    its port (local address ``*:<port>``); ``d`` of ``skmem`` is the socket's sk_drops (receive buffer full).
    Packet sockets live in their port's namespace: the switch ports are in the machine's, as ss is."""
    want = set(ports)
    out = {}
    for local, mem in _sockets(ss_text, pid):
        port = local.split(":", 1)[1] if ":" in local else ""
        if port in want:
            out[port] = out.get(port, 0) + mem.get("d", 0)
    return out


def send_socket(ss_text: str, pid: int) -> dict | None:
    """ovs-vswitchd's one send socket (unbound, protocol 0: local address ``[0]:*``): ``{"wmem": bytes
    charged now, "sndbuf": its send buffer}`` (None: it has not sent yet, or ``pid`` is not it)."""
    for local, mem in _sockets(ss_text, pid):
        if local == "[0]:*":
            return {"wmem": mem.get("t", 0), "sndbuf": mem.get("tb", 0)}
    return None


def port_frames(link_json: str, qdisc_json: str, ports) -> dict:
    """Frame counts of ``ports`` (``ip -s -j link show``, ``tc -s -j qdisc show``): ``rx`` received, ``tx``
    handed to the peer or dropped by the veth (tx packets + tx dropped), ``queue_drops`` and ``backlog``
    (frames in the queues now) of their root qdiscs."""
    want = set(ports)
    out = {"rx": 0, "tx": 0, "queue_drops": 0, "backlog": 0}
    for link in json.loads(link_json or "[]"):
        if link.get("ifname") in want:
            st = link.get("stats64") or link.get("stats") or {}
            out["rx"] += int(st.get("rx", {}).get("packets", 0))
            out["tx"] += int(st.get("tx", {}).get("packets", 0)) + int(st.get("tx", {}).get("dropped", 0))
    for q in json.loads(qdisc_json or "[]"):
        if q.get("root") and q.get("dev") in want:
            out["queue_drops"] += int(q.get("drops", 0))
            out["backlog"] += int(q.get("qlen", 0))
    return out


def unsent(before: dict, after: dict) -> int:
    """Frames ovs-vswitchd read on the replica's switch ports and never queued on one, between two
    :func:`snapshot` s: what its send socket lost, and what its pipelines dropped (the hosts' IPv6
    multicast, say; the ledger takes the hosts' own lost frames off), less flood copies."""
    def d(key):
        return after["ports"][key] - before["ports"][key]

    read = d("rx") - (sum(after["port_sockets"].values()) - sum(before["port_sockets"].values()))
    return read - (d("tx") + d("queue_drops") + d("backlog"))


def losses(before: dict, after: dict) -> dict:
    """``{entry: frames}`` of :data:`ENTRIES` between two :func:`snapshot` s (a negative inference, more
    frames out than in, is kept as it is: the ledger shows it)."""
    sockets = sum(after["port_sockets"].values()) - sum(before["port_sockets"].values())
    return {"ovs_send_socket": unsent(before, after), "ovs_port_sockets": sockets}


def edge_frames(before: dict, after: dict) -> dict:
    """Frames into (``in``) and out of (``out``) the fabric at its host-facing ports between two
    :func:`snapshot` s: what the hosts' interfaces sent and received (a veth's peer counts them)."""
    return {"in": after["edge"]["rx"] - before["edge"]["rx"], "out": after["edge"]["tx"] - before["edge"]["tx"]}


def snapshot(ports, edge, pid: int | None) -> dict:
    """The counters :func:`losses` and :func:`edge_frames` need, read now (root: the switch ports and
    ovs-vswitchd's sockets are in the machine's namespace). ``ports``: every switch port of the replica;
    ``edge``: those facing a host; ``pid``: ovs-vswitchd's."""
    def text(cmd):
        return subprocess.run(cmd, capture_output=True, text=True).stdout

    ss = text(["ss", "-0", "-m", "-p", "-H"]) if pid else ""
    links, qdiscs = text(["ip", "-s", "-j", "link", "show"]), text(["tc", "-s", "-j", "qdisc", "show"])
    with open("/proc/net/softnet_stat") as f:
        softnet = f.read()
    return {"ports": port_frames(links, qdiscs, ports), "edge": port_frames(links, qdiscs, edge),
            "port_sockets": port_socket_drops(ss, pid, ports) if pid else {},
            "send_socket": send_socket(ss, pid) if pid else None,
            "softnet_dropped": softnet_dropped(softnet)}


def switch_ports(plan) -> tuple[list, list]:
    """(every switch port of the replica, those facing a host): both ends of a switch-switch link, the
    switch end of a host link. Every frame enters and leaves the fabric through the host-facing ones."""
    def host(n):
        return plan.graph.nodes[n].get("role") == "host"

    ports, edge = set(), set()
    for e in plan.links:
        for n, intf, other in ((e.u, e.intf_u, e.v), (e.v, e.intf_v, e.u)):
            if not host(n):
                ports.add(intf)
                if host(other):
                    edge.add(intf)
    return sorted(ports), sorted(edge)
