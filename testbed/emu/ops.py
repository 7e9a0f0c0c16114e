"""Small root actions, as argv builders (pure, unit-tested) plus one runner.

Everything the emulation core does to the kernel or to Open vSwitch goes through :func:`run` with an
argv list built here, so that the exact commands are visible in tests and in error messages.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import struct
import subprocess

from testbed.errors import EmulationError

#: Linux IFNAMSIZ - 1.
IFNAME_MAX = 15  # Linux IFNAMSIZ - 1; testbed.plan.layout has the same limit (plan must not import emu)
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def check_ifname(name: str) -> str:
    """Raise unless ``name`` is a valid Linux interface name (<= 15 chars, no '/', ':' or spaces)."""
    if not (0 < len(name) <= IFNAME_MAX and _IFNAME_RE.match(name)):
        raise EmulationError(f"interface name {name!r} is invalid: 1-{IFNAME_MAX} characters of "
                             "letters, digits, '_', '.', '-'")
    return name


def in_netns(argv: list[str], netns: str | None) -> list[str]:
    """Prefix an ``ip`` command with ``-n NETNS`` (or any command with ``ip netns exec``)."""
    if not netns:
        return list(argv)
    if argv[:1] == ["ip"]:
        return ["ip", "-n", netns] + list(argv[1:])
    return ["ip", "netns", "exec", netns] + list(argv)


def netns_exec_argv(argv: list[str], netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns] + list(argv) if netns else list(argv)


def veth_argv(a: str, b: str, ns_a: str | None = None, ns_b: str | None = None, up: bool = True,
              mtu: int | None = None) -> list[list[str]]:
    """Commands creating veth ``a``--``b`` with each end in its namespace (created in place)."""
    create = ["ip", "link", "add", a]
    if ns_a:
        create += ["netns", ns_a]
    create += ["type", "veth", "peer", "name", b]
    if ns_b:
        create += ["netns", ns_b]
    cmds = [create]
    for name, ns in ((a, ns_a), (b, ns_b)):
        if mtu:
            cmds.append(in_netns(["ip", "link", "set", name, "mtu", str(mtu)], ns))
        if up:
            cmds.append(in_netns(["ip", "link", "set", name, "up"], ns))
    return cmds


def offload_off_argv(intf: str, netns: str | None = None) -> list[str]:
    """ethtool turning off TX checksum offload, TSO, GSO and GRO (needed by userspace forwarders)."""
    return netns_exec_argv(["ethtool", "-K", intf, "tx", "off", "tso", "off", "gso", "off", "gro", "off"],
                           netns)


def neigh_batch(entries) -> str:
    """``ip -batch`` text installing permanent neighbour entries: ``entries`` = [(ip, mac, dev)]."""
    return "".join(f"neigh replace {ip} lladdr {mac} dev {dev} nud permanent\n" for ip, mac, dev in entries)


def link_state_argv(name: str, up: bool) -> list[str]:
    """The ``ip`` equivalent of :func:`set_link_state` (for dry runs and messages)."""
    return ["ip", "link", "set", "dev", name, "up" if up else "down"]


def warm_netlink() -> None:
    """Load pyroute2 before a timed cut: its first import costs ~0.3-0.4 s of CPU, which inside the first
    cut delayed the cut itself and slowed ovs-vswitchd beside it (a 102 ms first outage in `bench
    failover`; 391 ms of "detection" in fabric_failover). Every caller that times a cut warms it this way:
    the import and one socket opened and closed (pyroute2 loads more on its first socket)."""
    from pyroute2 import IPRoute

    with IPRoute():
        pass


def set_link_state(names, up: bool, netns: str | None = None) -> None:
    """Bring interfaces up or down over netlink (pyroute2): what a cable cut looks like to the switch on
    that end. ``netns``: the namespace path (:func:`netns_of`) the interfaces live in; the root one if None.

    Raises:
        EmulationError: an interface is missing or the kernel refused.
    """
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    state = "up" if up else "down"

    def apply() -> None:
        with IPRoute() as ipr:
            for name in names:
                index = ipr.link_lookup(ifname=name)
                if not index:
                    raise EmulationError(f"cannot set {name} {state}: no such interface"
                                         + (f" in {netns}" if netns else ""))
                try:
                    ipr.link("set", index=index[0], state=state)
                except NetlinkError as exc:
                    raise EmulationError(f"cannot set {name} {state}: {exc}") from None

    if netns is None:
        apply()
    else:
        in_netns_thread(netns, apply)


def admin_down(names, netns: str | None = None) -> list[str]:
    """Of interfaces ``names`` (in ``netns``, the root one if None), those administratively down (IFF_UP
    clear, as :func:`set_link_state` or an OpenFlow port-mod leaves them) or missing."""
    from pyroute2 import IPRoute

    def read() -> list[str]:
        down = []
        with IPRoute() as ipr:
            for name in names:
                index = ipr.link_lookup(ifname=name)
                if not index or not ipr.get_links(index[0])[0]["flags"] & 1:   # IFF_UP
                    down.append(name)
        return down

    return read() if netns is None else in_netns_thread(netns, read)


def run(argv: list[str], *, what: str, check: bool = True, ok_codes=(0,), input: str | None = None,
        timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run ``argv``; raise EmulationError naming ``what`` and the command's stderr on failure."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=timeout)
    except FileNotFoundError:
        raise EmulationError(f"cannot {what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise EmulationError(f"cannot {what}: `{' '.join(argv)}` took more than {timeout:g}s") from None
    if check and res.returncode not in ok_codes:
        err = (res.stderr or res.stdout).strip().splitlines()
        raise EmulationError(f"cannot {what}: `{' '.join(argv)}` failed: {err[-1] if err else res.returncode}")
    return res


def link_index(name: str, netns: str | None = None) -> int | None:
    """ifindex of interface ``name`` (in ``netns``), or None when absent."""
    if netns is None:
        try:
            return int(open(f"/sys/class/net/{name}/ifindex").read())
        except (OSError, ValueError):
            return None
    res = subprocess.run(["ip", "-n", netns, "-j", "link", "show", "dev", name], capture_output=True,
                         text=True)
    if res.returncode != 0:
        return None
    try:
        return int(json.loads(res.stdout)[0]["ifindex"])
    except (ValueError, LookupError):
        return None


def netns_exists(name: str) -> bool:
    return os.path.exists(f"/run/netns/{name}")


def bridge_uuids() -> dict:
    """``{bridge name: ovsdb uuid}`` of every bridge, in one ``ovs-vsctl`` call ({} when OVS is not running)."""
    try:
        res = subprocess.run(["ovs-vsctl", "--timeout=5", "-f", "csv", "--no-headings", "--columns=name,_uuid",
                              "list", "Bridge"], capture_output=True, text=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return {}
    return parse_bridge_list(res.stdout) if res.returncode == 0 else {}


def parse_bridge_list(text: str) -> dict:
    """``name,uuid`` CSV lines (``ovs-vsctl -f csv --columns=name,_uuid list Bridge``) -> {name: uuid}."""
    out = {}
    for line in text.splitlines():
        name, _, uuid = line.partition(",")
        if uuid:
            out[name.strip().strip('"')] = uuid.strip()
    return out


# ------------------------------------------------------------------------------ teardown in batches
#: Interfaces per kernel batch: one ``ip link del group`` unregisters them all with one RCU grace period
#: (``unregister_netdevice_many``), where one ``ip link del`` each waits out a grace period per link
#: (tens of ms on a loaded machine: minutes for the thousands of veths of a fat-tree k=16).
LINKS_PER_BATCH = 1000

#: Interface groups used for a teardown batch: this base plus the pid of the process deleting (pids are
#: below 2**22), so two teardowns at once never share a group and nobody else's interface is in it.
LINK_GROUP_BASE = 0x5CA1_0000


def teardown_group(pid: int | None = None) -> int:
    """The interface group of this process's teardown batches (never 0, Linux's default group)."""
    return LINK_GROUP_BASE + ((os.getpid() if pid is None else pid) & 0x3F_FFFF)


def group_batch(names, group: int) -> str:
    """``ip -force -batch`` text putting each interface of ``names`` into ``group`` (a missing one is an
    error that -force skips: one end of a veth goes with the other)."""
    return "".join(f"link set dev {check_ifname(n)} group {group}\n" for n in names)


def del_group_argv(group: int) -> list[str]:
    """Delete every interface of ``group`` in one netlink request (one kernel batch)."""
    return ["ip", "link", "del", "group", str(group)]


def del_links_batch(names) -> str:
    """``ip -force -batch`` text deleting each interface of ``names`` (the slow path: one grace period each)."""
    return "".join(f"link del dev {check_ifname(n)}\n" for n in names)


def delete_links(names, *, group: int | None = None) -> None:
    """Delete root-namespace interfaces in kernel batches of :data:`LINKS_PER_BATCH`.

    Each batch tags its interfaces with this process's teardown group and deletes the group in one
    request; when the kernel refuses that, the batch falls back to one ``ip link del`` per interface.
    Never raises for an interface that stays: callers check what is left (timeouts included, so one slow
    batch does not stop the others).
    """
    names = list(names)
    group = teardown_group() if group is None else group
    for i in range(0, len(names), LINKS_PER_BATCH):
        chunk = names[i:i + LINKS_PER_BATCH]
        slack = 30 + len(chunk) * 0.2
        try:
            run(["ip", "-force", "-batch", "-"], what=f"group {len(chunk)} links", check=False,
                input=group_batch(chunk, group), timeout=slack)
            res = run(del_group_argv(group), what=f"delete {len(chunk)} links", check=False, timeout=slack)
            if res.returncode != 0 or any(os.path.exists(f"/sys/class/net/{n}") for n in chunk):
                run(["ip", "-force", "-batch", "-"], what=f"delete {len(chunk)} links", check=False,
                    input=del_links_batch(chunk), timeout=slack)
        except EmulationError:
            continue  # too slow this time: what is left is reported by the caller


#: Bridges deleted per ``ovs-vsctl`` call (one transaction each; OVS's userspace datapath handles a few
#: hundred port removals per transaction well).
BRIDGES_PER_CALL = 200


def del_br_argv(names: list[str]) -> list[str]:
    """One ovs-vsctl transaction deleting every bridge in ``names`` (those already gone are skipped)."""
    argv = ["ovs-vsctl", f"--timeout={30 + len(names) // 10}"]
    for name in names:
        argv += ["--", "--if-exists", "del-br", name]
    return argv


def delete_bridges(names, per_call: int = BRIDGES_PER_CALL) -> None:
    """Delete OVS bridges in transactions of ``per_call``; never raises (callers check what is left)."""
    names = list(names)
    for i in range(0, len(names), per_call):
        chunk = names[i:i + per_call]
        try:
            run(del_br_argv(chunk), what=f"delete {len(chunk)} bridges", check=False, timeout=120 + len(chunk))
        except EmulationError:
            continue


# ------------------------------------------------------------------------------ host addressing (netlink)
def netns_of(pid: int) -> str:
    """The network namespace of process ``pid`` as a path pyroute2 enters (a Mininet host's shell)."""
    return f"/proc/{int(pid)}/ns/net"


def configure_host(netns: str, dev: str, neighbours, routes) -> None:
    """Permanent neighbours ``[(ip, mac)]`` and on-link routes ``[subnet]`` on ``dev``, over netlink
    (pyroute2) inside the namespace at path ``netns`` (:func:`netns_of`); what ``ip neigh/route replace``
    would do, without a process per command.

    The netlink socket is opened by a thread that entered the namespace (setns(2) is per thread), not by
    pyroute2's ``netns=`` option: that forks a child, and a forked child of a run that turns SIGTERM into
    an exception would unwind through the run's ``with`` blocks and tear the replica down from the child.

    Raises:
        EmulationError: the namespace or the interface is missing, or the kernel refused an entry.
    """
    def configure() -> None:
        try:
            index = socket.if_nametoindex(dev)  # a socket of this thread: asks the namespace it entered
        except OSError:
            raise EmulationError(f"cannot configure {dev}: no such interface in {netns}") from None
        send_batch(host_config_requests(neighbours, routes, index), what=f"neighbours/routes on {dev} in {netns}")

    in_netns_thread(netns, configure)


#: Offsets in an encoded request: nlmsghdr (len u32, type u16, flags u16, seq u32, pid u32), then for a
#: neighbour the ndmsg (family u8, 3 pad, ifindex i32, ...).
_SEQ_OFFSET, _NDM_IFINDEX_OFFSET = 8, 20


def host_config_requests(neighbours, routes, index: int) -> list[bytearray]:
    """Encoded rtnetlink requests for :func:`configure_host` on interface ``index``: RTM_NEWNEIGH permanent
    per neighbour, RTM_NEWROUTE on-link per subnet (create or replace), sequence numbers left 0.

    pyroute2 encodes each neighbour once per process (its encoder costs ~0.6 ms a message: 10 s for the
    16,256 neighbours of a fat-tree k=8 otherwise); a host's copy only gets its interface index patched.
    """
    out = []
    for ip, mac in neighbours:
        buf = bytearray(_neigh_request(ip, mac))
        struct.pack_into("=i", buf, _NDM_IFINDEX_OFFSET, index)
        out.append(buf)
    return out + [bytearray(_route_request(net, index)) for net in routes]


_FLAGS_REPLACE = 0x1 | 0x4 | 0x400 | 0x100  # NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE


@functools.lru_cache(maxsize=1 << 17)
def _neigh_request(ip: str, mac: str) -> bytes:
    from pyroute2.netlink.rtnl import RTM_NEWNEIGH
    from pyroute2.netlink.rtnl.ndmsg import ndmsg

    msg = ndmsg()
    msg["family"], msg["ifindex"], msg["state"] = socket.AF_INET, 0, NUD_PERMANENT
    msg["attrs"] = [("NDA_DST", ip), ("NDA_LLADDR", mac)]
    msg["header"]["type"], msg["header"]["flags"] = RTM_NEWNEIGH, _FLAGS_REPLACE
    msg.encode()
    return bytes(msg.data)


def _route_request(net: str, index: int) -> bytes:
    import ipaddress

    from pyroute2.netlink.rtnl import RTM_NEWROUTE
    from pyroute2.netlink.rtnl.rtmsg import rtmsg

    net = ipaddress.ip_network(net)
    msg = rtmsg()
    msg["family"], msg["dst_len"] = socket.AF_INET, net.prefixlen
    msg["table"], msg["proto"], msg["scope"], msg["type"] = 254, 4, 253, 1  # main, static, link, unicast
    msg["attrs"] = [("RTA_DST", str(net.network_address)), ("RTA_OIF", index)]
    msg["header"]["type"], msg["header"]["flags"] = RTM_NEWROUTE, _FLAGS_REPLACE
    msg.encode()
    return bytes(msg.data)


#: Requests per sendmsg in :func:`send_batch`. Every request's ack is its own skb of about 1 KiB truesize
#: in the socket's receive buffer (212,992 bytes by default): 680 neighbours in one 32 KiB chunk, as a
#: fat-tree k=16 host has (1,023), overran it (ENOBUFS) and failed the build; 128 acks fit with room.
REQUESTS_PER_CHUNK = 128

#: Receive buffer asked for (the kernel caps it at net.core.rmem_max): room for the acks of a chunk.
RCVBUF_BYTES = 1 << 20


def chunk_bounds(sizes: list[int], chunk_bytes: int = 32768, per_chunk: int = REQUESTS_PER_CHUNK):
    """[(start, end)] of consecutive requests (of byte ``sizes``) sent in one sendmsg: at most ``per_chunk``
    of them, and none added once the chunk reaches ``chunk_bytes`` (pure)."""
    bounds, i = [], 0
    while i < len(sizes):
        start, size = i, 0
        while i < len(sizes) and size < chunk_bytes and i - start < per_chunk:
            size += sizes[i]
            i += 1
        bounds.append((start, i))
    return bounds


def send_batch(requests: list[bytearray], *, what: str, chunk_bytes: int = 32768) -> None:
    """Send encoded rtnetlink requests in chunks (:func:`chunk_bounds`: up to 32 KiB and
    :data:`REQUESTS_PER_CHUNK` requests), numbering them, then read every ack (one round trip per chunk,
    not per request: ``ip -batch`` speed without a process).

    Raises:
        EmulationError: the kernel refused a request (its errno, and which request), or the acks overran
            the socket (ENOBUFS).
    """
    from pyroute2.netlink import NLMSG_ERROR

    NETLINK_ROUTE = 0
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        sock.bind((0, 0))
        seq = 0
        for start, end in chunk_bounds([len(r) for r in requests], chunk_bytes):
            buf, sent = bytearray(), {}
            for i in range(start, end):
                seq += 1
                struct.pack_into("=I", requests[i], _SEQ_OFFSET, seq)
                buf += requests[i]
                sent[seq] = i
            sock.sendall(bytes(buf))
            while sent:
                try:
                    data = sock.recv(1 << 20)
                except OSError as exc:  # ENOBUFS: acks lost; which requests took effect is unknown
                    raise EmulationError(f"cannot set {what}: {len(sent)} acks unread: {exc.strerror}") from None
                offset = 0
                while offset + 16 <= len(data):
                    length, kind, _, ack_seq = struct.unpack_from("=IHHI", data, offset)
                    if kind == NLMSG_ERROR:
                        index = sent.pop(ack_seq, None)
                        (error,) = struct.unpack_from("=i", data, offset + 16)
                        if error != 0:
                            raise EmulationError(f"cannot set {what}: request {index}: {os.strerror(-error)}")
                    offset += max(length, 16)
    finally:
        sock.close()


#: linux/neighbour.h
NUD_PERMANENT = 0x80
#: linux/sched.h
CLONE_NEWNET = 0x40000000


def in_netns_thread(netns: str, fn):
    """Run ``fn()`` in a new thread that first enters the network namespace at path ``netns``; returns its
    result or raises its exception (the caller's own thread never changes namespace).

    Raises:
        EmulationError: the namespace cannot be entered.
    """
    import ctypes
    import threading

    outcome: dict = {}

    def work() -> None:
        try:
            fd = os.open(netns, os.O_RDONLY)
        except OSError as exc:
            outcome["error"] = EmulationError(f"cannot enter namespace {netns}: {exc.strerror}")
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                outcome["error"] = EmulationError(f"cannot enter namespace {netns}: {os.strerror(err)}")
                return
        finally:
            os.close(fd)
        try:
            outcome["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=work, name=f"netns {netns}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")
