"""Raise ovs-vswitchd's one AF_PACKET send socket's buffer for one run, and put it back (opt-in).

Why: on OVS's userspace datapath (``datapath_type=netdev``, OVS 3.1) ovs-vswitchd sends into every port
of every bridge through ONE packet socket (``lib/netdev-linux.c``, ``af_packet_sock``), charged for each
frame until the port's HTB (the modelled queue) sends it. Its send buffer is ``net.core.wmem_default``
when ovs-vswitchd made it (212,992 B: ~92 frames of MTU 1024), so all the switch ports' queues together
hold ~92 frames; beyond that ``sendmmsg`` fails with EAGAIN and OVS frees the batch, counted nowhere
(:mod:`testbed.emu.ovsloss` infers them). A larger buffer removes that loss (docs/collectives.md). The
daemon is shared by every OVS run on the machine, so the lever is opt-in, for one run, and restored.

Which socket (the rule): ovs-vswitchd's packet sockets are in the machine's namespace, so its own
``/proc/PID/net/packet`` lists them (columns ``sk RefCnt Type Proto Iface R Rmem User Inode``; Proto in
hex). A port's receive socket is bound to its port: Proto 0003 (ETH_P_ALL), Iface its ifindex. The send
socket is made with protocol 0 and never bound: **Proto 0000 and Iface 0** (what ``ss -0`` prints as
``[0]:*``, the rule :func:`testbed.emu.ovsloss.send_socket` uses). Its descriptor is the one of
``/proc/PID/fd`` whose link is ``socket:[<that Inode>]``. OVS creates it at its first frame sent (a
replica's warm-up pings), and never closes it. Exactly one must match; none or several is refused.

How: ``pidfd_open`` + ``pidfd_getfd`` (syscalls 434 / 438, the same on every architecture; Python 3.11's
``os`` has no pidfd_getfd) copy that descriptor into this process: the copy is the same socket, checked by
its inode. ``SO_SNDBUF`` reads its buffer; ``SO_SNDBUFFORCE`` (root: beyond net.core.wmem_max) sets it.
Linux keeps twice the value set (``sk_sndbuf = 2 * val``), so a size S is set as S // 2, and the original B
restored as B // 2, each checked by reading it back. (Setting it also sets SOCK_SNDBUF_LOCK, which only
stops TCP's buffer autotuning: nothing for a packet socket.)

Every way out of the ``with`` block restores it: normal exit, an exception, SIGINT, and SIGTERM/SIGHUP (the
CLI makes them raise; the restore runs with them held back). Against SIGKILL, the value before is saved
first (``<state>/ovs_send_buffer.json``: ovs-vswitchd's pid and start time, the socket's inode, the value
before and the one set, under the pid and start time of the process raising it, :mod:`testbed.emu.owned`);
once that process is gone, the next run raising it or ``testbed clean`` (:func:`restore_orphaned`) puts the
value back, if the same ovs-vswitchd's same socket still reads what was set (else it is not ours any more:
the record is dropped, nothing touched). One owner at a time: a second, while the first lives, is refused.
A run that finds it other than net.core.wmem_default notes that (``note``): it restores what it found. If
ovs-vswitchd restarted during the run, its new send socket has the default: the record says so
(``restored`` None and a note), nothing is raised.

Pure parts (:func:`parse_size_arg`, :func:`packet_table`, :func:`socket_inodes`, :func:`send_socket_fd`,
:func:`force_value`, :func:`line`) need no root; :class:`Raised`, :func:`restore_orphaned` and :func:`read` do.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path

from testbed.emu.owned import save_owned, saved_by_dead_owner
from testbed.errors import EmulationError, SpecError

OPTION = "--ovs-send-buffer"
#: bounds of a requested buffer: 64 KiB (a third of the default 208 KiB: less is another experiment, not
#: this lever) to 256 MiB (64 x the 4 MiB that removed the loss; frames charged to it are kernel memory)
MIN_BYTES = 64 << 10
MAX_BYTES = 256 << 20
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
SYS_PIDFD_GETFD = 438
#: what /proc/net/packet shows for the send socket: protocol 0, no interface
UNBOUND = (0, 0)
#: the owner record in the run registry's state directory (:mod:`testbed.emu.owned`)
SAVED = "ovs_send_buffer.json"


class NoSendSocket(EmulationError):
    """ovs-vswitchd has no (or no single) unbound packet socket."""


def parse_size_arg(text, field: str = OPTION) -> int:
    """``4MiB`` -> 4194304: the send buffer as SO_SNDBUF reads it back (and ``ss -m`` shows as ``tb``);
    whole, even bytes (Linux keeps twice the value set), between :data:`MIN_BYTES` and :data:`MAX_BYTES`."""
    from testbed.units import parse_size

    size = parse_size(text, field)
    if size != int(size) or int(size) % 2:
        raise SpecError(field, f"must be a whole, even number of bytes (Linux keeps twice the value set), got {text!r}")
    size = int(size)
    if not MIN_BYTES <= size <= MAX_BYTES:
        raise SpecError(field, f"must be between {MIN_BYTES >> 10} KiB and {MAX_BYTES >> 20} MiB (e.g. 4MiB), "
                               f"got {text!r}")
    return size


def packet_table(text: str) -> dict:
    """``{inode: (protocol, ifindex)}`` of ``/proc/PID/net/packet`` (header line skipped; Proto is hex)."""
    out = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 9 and cols[8].isdigit():
            out[int(cols[8])] = (int(cols[3], 16), int(cols[4]))
    return out


def socket_inodes(links: dict) -> dict:
    """``{fd: inode}`` of the sockets among ``{fd: readlink(/proc/PID/fd/fd)}`` (``socket:[12345]``)."""
    out = {}
    for fd, target in links.items():
        m = re.fullmatch(r"socket:\[(\d+)\]", target or "")
        if m:
            out[int(fd)] = int(m.group(1))
    return out


def send_socket_fd(fds: dict, table: dict, pid: int) -> tuple[int, int]:
    """(fd, inode) of the one unbound packet socket (:data:`UNBOUND`) among ``fds`` ({fd: inode}) by
    ``table`` (:func:`packet_table`). None (ovs-vswitchd has sent nothing yet) or several (a port's receive
    socket is unbound for a moment while OVS adds the port): :class:`NoSendSocket`."""
    found = sorted((fd, ino) for fd, ino in fds.items() if table.get(ino) == UNBOUND)
    if not found:
        raise NoSendSocket(f"ovs-vswitchd (pid {pid}) has no send socket yet (it makes one at its first frame "
                           "sent): send a frame through the replica first (its warm-up pings do)")
    if len(found) > 1:
        raise NoSendSocket(f"ovs-vswitchd (pid {pid}) has {len(found)} unbound packet sockets "
                           f"(fds {[fd for fd, _ in found]}), not one: a port being added? Not changed")
    return found[0]


def force_value(size: int) -> int:
    """What to pass to SO_SNDBUFFORCE for SO_SNDBUF to read ``size`` (Linux doubles it)."""
    return size // 2


def line(record: dict) -> str:
    """One line on what was done to the shared send buffer (``record``: :attr:`Raised.record`)."""
    if not record.get("applied"):
        return "ovs-vswitchd's send buffer: not applied"
    head = (f"ovs-vswitchd's send buffer (one socket, shared by every OVS run on this machine) raised from "
            f"{record['before']:,} B to {record['during']:,} B for this run")
    if record.get("restored"):
        return f"{head} and restored to {record['after']:,} B"
    if record.get("restored") is None:
        return f"{head}; {record.get('note', 'not restored')}"
    return f"{head}; NOT restored: {record.get('note', '')} (read {record.get('after')} B)"


# ------------------------------------------------------------------------------------------- root glue
def _find(pid: int) -> tuple[int, int]:
    """(fd, inode) of ``pid``'s send socket, by the rule above (root)."""
    links = {}
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
        with open(f"/proc/{pid}/net/packet") as f:
            table = packet_table(f.read())
    except OSError as exc:
        raise EmulationError(f"cannot read ovs-vswitchd's sockets (pid {pid}): {exc.strerror}") from None
    for name in names:
        try:
            links[name] = os.readlink(f"{base}/{name}")
        except OSError:
            continue        # closed meanwhile
    return send_socket_fd(socket_inodes(links), table, pid)


def _wmem_default() -> int | None:
    try:
        with open("/proc/sys/net/core/wmem_default") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _copy_fd(pid: int, fd: int) -> int:
    """A descriptor in this process for ``pid``'s ``fd`` (pidfd_open + pidfd_getfd; root)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        raise EmulationError(f"pidfd_open(ovs-vswitchd pid {pid}): {exc.strerror}") from None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        copy = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if copy < 0:
            err = ctypes.get_errno()
            raise EmulationError(f"pidfd_getfd(ovs-vswitchd pid {pid}, fd {fd}): {os.strerror(err)}")
        return copy
    finally:
        os.close(pidfd)


def _open(pid: int) -> tuple[socket.socket, int, int]:
    """(this process's copy of ``pid``'s send socket, its fd there, its inode)."""
    fd, inode = _find(pid)
    copy = _copy_fd(pid, fd)
    if os.fstat(copy).st_ino != inode:       # the fd was closed and reused between the two reads
        os.close(copy)
        raise NoSendSocket(f"ovs-vswitchd (pid {pid}) fd {fd} is no longer its send socket; not changed")
    return socket.socket(fileno=copy), fd, inode


def read(pid: int | None = None) -> int:
    """SO_SNDBUF of ovs-vswitchd's send socket now (root)."""
    from testbed.emu.health import ovs_pid

    pid = pid or ovs_pid()
    if not pid:
        raise EmulationError("ovs-vswitchd is not running")
    sock, _, _ = _open(pid)
    with sock:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)


def _force(sock, size: int) -> int:
    """Set the send buffer so that SO_SNDBUF reads ``size`` (SO_SNDBUFFORCE, root); returns what it reads
    back (raises OSError)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, force_value(size))
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)


def restore_orphaned(state: Path, alive: Callable[[int, float | None], bool], open_socket=None) -> bool:
    """Put ovs-vswitchd's send buffer back when the process that raised it died first (SIGKILL); True when
    it did.

    The record is dropped with nothing touched when that ovs-vswitchd is gone (its new socket has the
    default), its send socket is another one, or the buffer no longer reads what was set (changed since, or
    the run died between saving and setting). It is kept, for a later try, when the socket cannot be
    reached or set now.

    Args:
        state: the run registry's state directory.
        alive: ``alive(pid, start)``: is that process still the one recorded (the owner, ovs-vswitchd).
        open_socket: ``open_socket(pid) -> (socket, fd, inode)`` (default: the copy of ovs-vswitchd's).
    """
    path = state / SAVED
    doc = saved_by_dead_owner(path, alive)
    if doc is None:
        return False
    open_socket = open_socket or _open
    try:
        ovs, inode, before, raised = int(doc["ovs_pid"]), doc["inode"], int(doc["before"]), int(doc["raised"])
    except (KeyError, TypeError, ValueError):
        path.unlink(missing_ok=True)    # not a record this module wrote: nothing known to put back
        return False
    if not alive(ovs, doc.get("ovs_start")):
        path.unlink(missing_ok=True)
        return False
    try:
        sock, _, now_inode = open_socket(ovs)
    except NoSendSocket:
        path.unlink(missing_ok=True)
        return False
    except EmulationError:
        return False
    with sock:
        try:
            if now_inode != inode or sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) != raised:
                path.unlink(missing_ok=True)
                return False
            if _force(sock, before) != before:
                return False
        except OSError:
            return False
    path.unlink(missing_ok=True)
    return True


def _owner(path: Path) -> str:
    """Who holds the record at ``path``, for the message refusing a second owner."""
    try:
        return f"pid {json.loads(path.read_text()).get('pid')}"
    except (OSError, ValueError, AttributeError):
        return f"unreadable record {path}: remove it if no run raised the buffer"


class Raised:
    """Context manager: ovs-vswitchd's send buffer at ``size`` bytes inside the block, its value before
    restored on exit (every way out; after SIGKILL by :func:`restore_orphaned`). :attr:`record`: ``applied``,
    ``requested``, ``before``, ``during``, ``after``, ``restored`` (True, False, or None when ovs-vswitchd
    restarted meanwhile), ``pid``, ``fd``, ``note``.

    Args:
        size: the send buffer wanted (as SO_SNDBUF reads it back).
        pid: ovs-vswitchd's pid (default: from its pid file).
        state: where the owner record goes (default: the run registry's state directory).
    """

    def __init__(self, size: int, pid: int | None = None, state: Path | None = None):
        self.size, self.pid, self.state = size, pid, state
        self.record: dict = {"applied": False, "requested": size}
        self._sock = None
        self._start = None
        self._saved: Path | None = None

    def __enter__(self) -> "Raised":
        from testbed.emu.health import ovs_pid
        from testbed.emu.registry import process_start, same_process, state_dir

        state = Path(self.state) if self.state is not None else state_dir()
        restore_orphaned(state, same_process)      # a run killed with it raised: put back first
        saved = state / SAVED
        if saved.exists():
            raise EmulationError(f"{OPTION}: ovs-vswitchd's send buffer is held raised by a live process "
                                 f"({_owner(saved)}); not changed")
        pid = self.pid or ovs_pid()
        if not pid:
            raise EmulationError(f"{OPTION}: ovs-vswitchd is not running")
        self._start = process_start(pid)
        sock, fd, inode = _open(pid)
        try:
            before = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            try:
                save_owned(saved, {"ovs_pid": pid, "ovs_start": self._start, "inode": inode, "before": before,
                                   "raised": self.size}, os.getpid(), process_start(os.getpid()))
            except OSError as exc:
                raise EmulationError(f"{OPTION}: cannot save the value to put back in {saved} ({exc.strerror}); "
                                     "not changed") from None
            self._sock, self._saved = sock, saved
            self.record.update(pid=pid, fd=fd, inode=inode, before=before)
            during = _force(sock, self.size)
            self.record.update(applied=True, during=during)
            default = _wmem_default()
            if default is not None and before != default:
                self.record["note"] = (f"found at {before} B, not net.core.wmem_default ({default} B): an earlier "
                                       "run killed before restoring it? It is put back to what was found")
            if during != self.size:
                raise EmulationError(f"{OPTION}: set {force_value(self.size)} B, read back {during} B, not "
                                     f"{self.size}")
        except BaseException:
            if self._sock is None:
                sock.close()
            self._restore()
            raise
        return self

    def __exit__(self, *exc) -> None:
        from testbed.emu.signals import deferred_signals

        with deferred_signals():
            self._restore()

    def _restore(self) -> None:
        """Put the value before back; the owner record goes once nothing is left to put back (kept when the
        restore failed: :func:`restore_orphaned` tries again once this process is gone)."""
        from testbed.emu.health import ovs_pid
        from testbed.emu.registry import same_process

        sock, self._sock = self._sock, None
        if sock is None:
            return
        rec = self.record
        try:
            if not same_process(rec["pid"], self._start):
                now = ovs_pid()
                rec.update(restored=None, after=None,
                           note=f"ovs-vswitchd restarted during the run (pid {rec['pid']}, now {now}): its send "
                                "socket went with it, the new one has the default; nothing to restore")
                self._saved.unlink(missing_ok=True)
                return
            try:
                rec["after"] = _force(sock, rec["before"])
            except OSError as exc:
                rec.update(restored=False, after=None, note=f"setsockopt: {exc.strerror}")
                return
            rec["restored"] = rec["after"] == rec["before"]
            if rec["restored"]:
                self._saved.unlink(missing_ok=True)
            else:
                rec["note"] = f"set {force_value(rec['before'])} B, read back {rec['after']} B"
        finally:
            sock.close()     # our copy only: ovs-vswitchd's descriptor stays open
