"""Run registry: a record of every object a run creates, so cleanup removes exactly those.

``mn -c`` cleans up by pattern (every bridge, every ``*-eth*`` link, ``pkill`` of every controller); on a
machine where several people run experiments that destroys their runs too. Instead each run keeps a
record, written *before* an object is created (processes right after: a pid is only known then)::

    /run/scaleout-testbed/
        lock                 flock(2): one emulation run at a time (interface names are global)
        lock.owner           {"pid", "name"} of the run holding the lock (for the error message)
        runs/<run_id>.json   {"name", "owner": {"pid", "start"}, "objects": [...]}

An object is one of::

    {"kind": "process", "pid": 123, "start": 1700000000.12, "argv": [...]}   start time: a reused pid
    {"kind": "bridge",  "name": "s1", "uuid": "..."}                            is never killed
    {"kind": "link",    "name": "s1-eth1", "netns": null, "ifindex": 17}
    {"kind": "netns",   "name": "p4t-a"}

Leaving the ``with`` block (normally, by exception, SIGINT or SIGTERM) removes every object and the
record.  After a SIGKILL the record stays; ``testbed clean`` (:func:`clean_runs`) removes the objects of
runs whose owner is dead.  Usable without Mininet::

    with RunRegistry("p4-test") as run:
        run.add_netns("p4t-h1")
        run.add_veth("p4t-h1-0", "p4t-s1-1", ns_a="p4t-h1")
        proc = run.spawn(["simple_switch_fast", ...], log=out_dir / "s1.log")
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from testbed.console import console
from testbed.emu import ops, ovssndbuf, rcu, softirq
from testbed.emu.laps import Laps
from testbed.emu.signals import deferred_signals, terminate_raises
from testbed.errors import EmulationError, NotRootError, TestbedError
from testbed.poll import poll

STATE_DIR_ENV = "TESTBED_STATE_DIR"
LOCK_WAIT_ENV = "TESTBED_LOCK_WAIT"
DEFAULT_STATE_DIR = "/run/scaleout-testbed"


#: Name of the run holding the machine-wide lock in this process (flock would deadlock on a second one).
_HELD: str | None = None


class LockBusyError(TestbedError):
    """Another run holds the machine-wide lock."""

    exit_code = 1


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV, DEFAULT_STATE_DIR))


def process_start(pid: int) -> float | None:
    """Start time of ``pid`` (seconds since the epoch), or None when no such process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def same_process(pid: int, start: float | None) -> bool:
    """True when ``pid`` is alive and is the very process started at ``start`` (not a reused pid)."""
    now = process_start(pid)
    if now is None:
        return False
    if start is None:
        return True
    return abs(now - start) < 0.05


def lock_wait_seconds(environ=os.environ) -> float:
    """Seconds to wait for the lock, from ``TESTBED_LOCK_WAIT`` (default 0: fail at once)."""
    raw = environ.get(LOCK_WAIT_ENV, "0") or "0"
    try:
        value = float(raw)
    except ValueError:
        raise EmulationError(f"{LOCK_WAIT_ENV}={raw!r}: must be a number of seconds") from None
    if value < 0:
        raise EmulationError(f"{LOCK_WAIT_ENV}={raw!r}: must be >= 0")
    return value


class RunRegistry:
    """Context manager recording (and on exit removing) the objects of one run.

    Args:
        name: short human name of the run (shown by ``testbed clean`` and in the lock message).
        exclusive: take the machine-wide lock (runs using global names such as ``s1-eth1`` must).
            Probes that use unique names (``testbed doctor``) pass False.
        lock_wait: seconds to wait for the lock; default from ``TESTBED_LOCK_WAIT`` (0 = fail at once).
        root: state directory (default ``/run/scaleout-testbed`` or ``$TESTBED_STATE_DIR``).
    """

    def __init__(self, name: str, *, exclusive: bool = True, lock_wait: float | None = None,
                 root: Path | None = None):
        self.name = name
        self.exclusive = exclusive
        self.lock_wait = lock_wait
        self.root = Path(root) if root else state_dir()
        self.pid = os.getpid()
        self.start = process_start(self.pid)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_id = f"{_safe(name)}-{self.pid}-{stamp}"
        self.path = self.root / "runs" / f"{self.run_id}.json"
        self.objects: list[dict] = []
        self._lock_fd: int | None = None
        self.timings: dict = {}
        self._active = False
        self._signals = None
        self._softirq: contextlib.ExitStack | None = None
        #: ksoftirqd threads raised for this run's real-time processes (None: none started yet).
        self.softirq_raised: int | None = None

    # ----------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> "RunRegistry":
        try:
            (self.root / "runs").mkdir(parents=True, exist_ok=True)
            if self.exclusive:
                self._acquire_lock()
        except PermissionError:
            raise NotRootError(f"an emulation run ({self.name}; state in {self.root})") from None
        try:
            if self.exclusive:
                for report in clean_runs(self.root, only_dead=True):
                    if report["removed"]:
                        console.print(f"[yellow]removed leftovers of dead run {report['run_id']}[/yellow]")
            self._active = True
            self._save()
            self._signals = terminate_raises()
            self._signals.__enter__()
        except BaseException:
            self._release_lock()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            with deferred_signals():
                self.cleanup()
        finally:
            if self._signals is not None:
                self._signals.__exit__(None, None, None)
                self._signals = None
            self._release_lock()

    def cleanup(self) -> dict:
        """Remove every recorded object (newest first) and the record; returns what was done."""
        report = self.sweep()
        if self._softirq is not None:  # after the sweep: the real-time processes are gone by then
            self._softirq.close()
            self._softirq = None
        if not report["failed"]:
            self.path.unlink(missing_ok=True)
            self._active = False
        else:
            console.print(f"[red]could not remove {report['failed']}; run `sudo testbed clean`[/red]")
        return report

    def sweep(self) -> dict:
        """Remove every object recorded so far and go on recording (``bench build`` builds several replicas
        in one run, and a teardown is only over once these are gone). The seconds of each step are kept in
        ``self.timings``: where a large teardown spends its time."""
        self.timings = {}
        report = remove_objects(self.objects, timings=self.timings)
        if not report["failed"]:
            self.objects = []
        if self._active:
            self._save()
        return report

    # ----------------------------------------------------------------------------- the lock
    def _acquire_lock(self) -> None:
        global _HELD
        if _HELD is not None:
            raise EmulationError(f"run {self.name!r}: this process already holds the testbed lock (run "
                                 f"{_HELD!r}); pass that RunRegistry on (e.g. Replica(..., run=run))")
        lock_path = self.root / "lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)

        def try_lock() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    return False
                raise
            return True

        wait = lock_wait_seconds() if self.lock_wait is None else self.lock_wait
        ticket = None
        try:
            if not (self._first_in_queue(None) and try_lock()):  # never jump the queue of waiters
                if wait <= 0:
                    raise LockBusyError(self._busy_message())
                console.print(f"waiting up to {wait:g}s for {self._busy_message(short=True)}")
                # Waiters queue in arrival order (tickets), so a busy machine does not starve anyone.
                ticket = self._take_ticket()
                try:
                    poll(lambda: self._first_in_queue(ticket) and try_lock(), timeout=wait, interval=0.1,
                         what="the testbed lock")
                except TimeoutError:
                    raise LockBusyError(self._busy_message()) from None
        except BaseException:
            os.close(fd)
            raise
        finally:
            if ticket is not None:
                ticket.unlink(missing_ok=True)
        self._lock_fd = fd
        _HELD = self.name
        (self.root / "lock.owner").write_text(json.dumps({"pid": self.pid, "name": self.name,
                                                          "run_id": self.run_id}))

    def _take_ticket(self) -> Path:
        queue = self.root / "queue"
        queue.mkdir(exist_ok=True)
        ticket = queue / f"{time.time_ns():020d}-{self.pid}"
        ticket.write_text(json.dumps({"pid": self.pid, "start": self.start, "name": self.name}))
        return ticket

    def _first_in_queue(self, ticket: Path | None) -> bool:
        """True when no live waiter queued before ``ticket`` (None: at all); dead waiters' tickets are
        dropped."""
        queue = self.root / "queue"
        for other in sorted(queue.iterdir()) if queue.is_dir() else []:
            if ticket is not None and other.name >= ticket.name:
                return True
            try:
                doc = json.loads(other.read_text())
            except (OSError, ValueError):
                continue
            if same_process(int(doc.get("pid", 0)), doc.get("start")):
                return False
            other.unlink(missing_ok=True)
        return True

    def _busy_message(self, short: bool = False) -> str:
        try:
            owner = json.loads((self.root / "lock.owner").read_text())
            who = f"pid {owner.get('pid')}, name {owner.get('name')}"
        except (OSError, ValueError):
            who = "owner unknown"
        if short:
            return f"another testbed run ({who})"
        return f"another testbed run is active ({who}); wait or `sudo testbed clean`"

    def _release_lock(self) -> None:
        global _HELD
        if self._lock_fd is None:
            return
        _HELD = None
        try:
            (self.root / "lock.owner").unlink(missing_ok=True)
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ----------------------------------------------------------------------------- recording
    def _save(self) -> None:
        """Write the record (after every recorded object, so a crash leaves nothing unrecorded). One line,
        no indent: ``indent`` switches json to its pure-Python encoder, and with ~200 saves of a growing
        record that alone took 8 s of a fat-tree k=8 build."""
        doc = {"name": self.name, "run_id": self.run_id, "owner": {"pid": self.pid, "start": self.start},
               "created": _dt.datetime.now().isoformat(timespec="seconds"), "objects": self.objects}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, self.path)

    def _record(self, *objects: dict) -> list[dict]:
        if not self._active:
            raise EmulationError(f"run registry {self.name!r} used outside its `with` block")
        self.objects.extend(objects)
        self._save()
        return list(objects)

    def record_netns(self, name: str) -> dict:
        """Record a named network namespace (before creating it)."""
        return self._record({"kind": "netns", "name": name})[0]

    def record_link(self, name: str, netns: str | None = None) -> dict:
        """Record a network interface (before creating it); deleting one end of a veth deletes both."""
        return self._record({"kind": "link", "name": name, "netns": netns})[0]

    def record_links(self, names, netns: str | None = None) -> None:
        """Record many interfaces with one write of the record."""
        self._record(*({"kind": "link", "name": n, "netns": netns} for n in names))

    def record_bridge(self, name: str) -> dict:
        """Record an OVS bridge (before creating it)."""
        return self._record({"kind": "bridge", "name": name})[0]

    def record_bridges(self, names) -> None:
        self._record(*({"kind": "bridge", "name": n} for n in names))

    def record_process(self, proc, argv=None) -> dict:
        """Record a started process (a pid or a Popen), with its start time."""
        pid = proc if isinstance(proc, int) else proc.pid
        if argv is None and not isinstance(proc, int):
            argv = proc.args if isinstance(proc.args, (list, tuple)) else [str(proc.args)]
        return self._record({"kind": "process", "pid": pid, "start": process_start(pid),
                             "argv": [str(a) for a in (argv or [])][:20]})[0]

    def save(self) -> None:
        """Write the record again (after details were added to recorded objects)."""
        self._save()

    def note(self, obj: dict, **fields) -> None:
        """Add identifying details (ifindex, bridge uuid) to a recorded object once it exists."""
        obj.update(fields)
        self._save()

    # ----------------------------------------------------------------------------- helpers
    def add_netns(self, name: str) -> str:
        """Create a named network namespace (``ip netns add``) with its loopback up."""
        self.record_netns(name)
        ops.run(["ip", "netns", "add", name], what=f"create netns {name}")
        ops.run(["ip", "-n", name, "link", "set", "lo", "up"], what=f"bring up lo in {name}")
        return name

    def add_veth(self, a: str, b: str, ns_a: str | None = None, ns_b: str | None = None,
                 up: bool = True, mtu: int | None = None) -> tuple[str, str]:
        """Create a veth pair ``a``--``b``, moving each end into its namespace (None: this one).

        Both ends are recorded first; TX offloads are disabled (userspace switches and AF_PACKET
        forwarders drop or mangle packets with partial checksums).
        """
        for name in (a, b):
            ops.check_ifname(name)
        self._record({"kind": "link", "name": a, "netns": ns_a}, {"kind": "link", "name": b, "netns": ns_b})
        for argv in ops.veth_argv(a, b, ns_a, ns_b, up=up, mtu=mtu):
            ops.run(argv, what=f"create veth {a}--{b}")
        for name, ns in ((a, ns_a), (b, ns_b)):
            ops.run(ops.offload_off_argv(name, ns), what=f"disable offloads on {name}", check=False)
        return a, b

    def spawn(self, argv, *, netns: str | None = None, log: Path | None = None, realtime: int | None = None,
              **popen_kwargs) -> subprocess.Popen:
        """Start a process (in ``netns`` if given) in its own session and record it.

        Args:
            argv: the command.
            netns: a named namespace to run it in (``ip netns exec``).
            log: file receiving stdout and stderr (default: inherited unless given in popen_kwargs).
            realtime: the SCHED_FIFO priority the process gives itself (a link core): until this run's
                cleanup the kernel's softirq threads run one above it (:mod:`testbed.emu.softirq`).
        """
        if realtime is not None and realtime > 0 and self._softirq is None:
            stack = contextlib.ExitStack()
            self.softirq_raised = stack.enter_context(
                softirq.ahead(self.root, same_process, self.start, min(realtime + 1, 99)))
            self._softirq = stack
        full = ops.netns_exec_argv(list(argv), netns)
        popen_kwargs.setdefault("start_new_session", True)
        log_file = None
        if log is not None:
            Path(log).parent.mkdir(parents=True, exist_ok=True)
            log_file = open(log, "ab")  # noqa: SIM115 - handed to the child, closed below
            popen_kwargs.setdefault("stdout", log_file)
            popen_kwargs.setdefault("stderr", subprocess.STDOUT)
        try:
            proc = subprocess.Popen(full, **popen_kwargs)
        except FileNotFoundError as exc:
            raise EmulationError(f"cannot start {argv[0]}: {exc.strerror}") from None
        finally:
            if log_file is not None:
                log_file.close()
        self.record_process(proc, argv=full)
        return proc


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40] or "run"


# --------------------------------------------------------------------------------- removal
#: Seconds a process gets after its polite signal (SIGTERM, or SIGHUP for a Mininet shell) before SIGKILL.
KILL_GRACE_S = 3.0

#: What one removal step may fail with; it is reported for the objects of that step and the next step runs
#: (a teardown that stops at the first error leaves everything after it behind, and its record too).
_STEP_ERRORS = (OSError, EmulationError, TimeoutError, subprocess.SubprocessError)


def expedited_rcu():
    """Expedited RCU grace periods for a teardown (:mod:`testbed.emu.rcu`: ovs-vswitchd waits one grace
    period per port it removes), the kernel's setting restored after, also after a crash."""
    return rcu.expedited(state_dir(), same_process, process_start(os.getpid()))


def remove_objects(objects: list[dict], dry_run: bool = False, require_identity: bool = False,
                   timings: dict | None = None) -> dict:
    """Remove recorded objects: processes first, then bridges, links, namespaces.

    Only objects that still exist *and* are still the same object are touched: a process whose start
    time differs, a bridge whose uuid differs, a link whose ifindex differs were re-created by
    someone else and are left alone. Each kind is removed in one pass, so teardown time does not grow
    with a per-object timeout: every process is signalled at once and waited for together, bridges go
    in batched ``ovs-vsctl`` transactions, root-namespace links in kernel batches
    (:func:`testbed.emu.ops.delete_links`). A step that fails (ovsdb or the kernel too slow to answer)
    is reported for its objects and the next step still runs; this function never raises.

    Args:
        require_identity: keep (report as "kept") bridges and root-namespace links recorded by name only
            (a run killed before noting their uuid/ifindex): while another run holds the lock, the same
            name may be that run's.
        timings: when given, receives the seconds each step took (``processes``, ``bridges``, ``links``,
            ``namespaces``): where a large teardown spends its time.

    Returns:
        {"removed": [desc...], "gone": [desc...], "kept": [desc...], "failed": [desc...]}
    """
    report = {"removed": [], "gone": [], "kept": [], "failed": []}
    by_kind: dict = {}
    for obj in reversed(objects):
        by_kind.setdefault(obj.get("kind"), []).append(obj)
    for kind in set(by_kind) - {"process", "bridge", "link", "netns"}:
        for obj in by_kind[kind]:
            report["failed"].append(f"{describe(obj)}: unknown object kind {kind!r} in run record")
    in_ns = [o for o in by_kind.get("link", []) if o.get("netns")]
    steps = (("processes", _kill_all, by_kind.get("process", [])),
             ("bridges", lambda objs, dry, rep: _remove_bridges(objs, dry, require_identity, rep),
              by_kind.get("bridge", [])),
             ("links", lambda objs, dry, rep: _remove_links(objs, dry, require_identity, rep),
              [o for o in by_kind.get("link", []) if not o.get("netns")]),
             ("namespaces", _remove_each, in_ns + by_kind.get("netns", [])))
    kernel_work = any(by_kind.get(k) for k in ("bridge", "link", "netns"))
    with expedited_rcu() if kernel_work and not dry_run else contextlib.nullcontext():
        _run_steps(steps, dry_run, report, timings)
    return report


def _run_steps(steps, dry_run: bool, report: dict, timings: dict | None) -> None:
    lap = Laps({} if timings is None else timings)   # a skipped step costs nothing: the next lap is its own
    for label, step, objs in steps:
        if not objs:
            continue
        before = sum(len(v) for v in report.values())
        try:
            step(objs, dry_run, report)
        except _STEP_ERRORS as exc:
            if sum(len(v) for v in report.values()) == before:  # nothing attributed yet: all of them failed
                report["failed"].extend(f"{describe(o)}: {exc}" for o in objs)
            else:
                report["failed"].append(f"{len(objs)} {objs[0]['kind']} objects: {exc}")
        lap(label)


def polite_signal(obj: dict) -> int:
    """The signal that ends a recorded process cleanly: SIGHUP for a Mininet shell (an interactive bash
    ignores SIGTERM, and hangs up its jobs on SIGHUP, as Mininet's own ``terminate`` does), else SIGTERM."""
    argv = obj.get("argv") or [""]
    return signal.SIGHUP if str(argv[0]).startswith("mininet:") else signal.SIGTERM


def _kill_all(objs: list[dict], dry_run: bool, report: dict) -> None:
    """Signal every live recorded process at once, wait for all together, SIGKILL the survivors."""
    live = []
    for obj in objs:
        if same_process(obj["pid"], obj.get("start")):
            live.append(obj)
        else:
            report["gone"].append(describe(obj))
    if dry_run:
        report["removed"].extend(describe(o) for o in live)
        return

    def send(obj, sig) -> None:
        pid = obj["pid"]
        if not same_process(pid, obj.get("start")):
            return
        try:
            os.killpg(pid, sig) if os.getpgid(pid) == pid else os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def survivors() -> list[dict]:
        return [o for o in live if _alive(o["pid"], o.get("start"))]

    for obj in live:
        send(obj, polite_signal(obj))
    try:
        poll(lambda: not survivors(), timeout=KILL_GRACE_S, interval=0.02, what=f"{len(live)} processes to exit")
    except TimeoutError:
        for obj in survivors():
            send(obj, signal.SIGKILL)
        try:
            poll(lambda: not survivors(), timeout=5.0, interval=0.02, what="killed processes to die")
        except TimeoutError:
            pass
    still = survivors()
    for obj in live:
        if obj in still:
            report["failed"].append(f"{describe(obj)}: still running after SIGKILL")
        else:
            report["removed"].append(describe(obj))


def bridge_uuids() -> dict | None:
    """``{name: uuid}`` of every OVS bridge in one ovsdb query; None when Open vSwitch is not installed.

    Raises:
        EmulationError: ovsdb did not answer (a loaded machine): the bridges' fate is unknown, so they
            must not be reported gone (their record is kept for ``testbed clean``).
    """
    try:
        res = subprocess.run(["ovs-vsctl", "--timeout=30", "-f", "csv", "--no-headings", "--columns=name,_uuid",
                              "list", "Bridge"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        raise EmulationError("ovsdb did not answer within 60 s") from None
    if res.returncode != 0:
        raise EmulationError(f"cannot list OVS bridges: {(res.stderr or res.stdout).strip()[-200:]}")
    return ops.parse_bridge_list(res.stdout)


def _classify(objs: list[dict], key: str, now, require_identity: bool, report: dict) -> list[tuple[dict, object]]:
    """Sort recorded bridges or links by what carries their name now.

    ``now(name)`` is the identity (``key``: a bridge's ``uuid``, a link's ``ifindex``) of the object of that
    name today, or None. Absent, or another object of the same name: "gone". Recorded by name only while
    ``require_identity``: "kept". The rest is returned as ``(obj, identity)``, to remove.
    """
    doomed = []
    for obj in objs:
        ident = now(obj["name"])
        if ident is None or (obj.get(key) and obj[key] != ident):
            report["gone"].append(describe(obj))
        elif require_identity and not obj.get(key):
            report["kept"].append(describe(obj) + " (recorded by name only while another run is active)")
        else:
            doomed.append((obj, ident))
    return doomed


def _attribute(doomed: list[tuple[dict, object]], now, what: str, report: dict) -> None:
    """After removing ``doomed``: an object whose name still carries the same identity failed; the rest
    (deleting one end of a veth deletes its peer too) was removed."""
    for obj, ident in doomed:
        if now(obj["name"]) == ident:
            report["failed"].append(f"{describe(obj)}: still present after {what}")
        else:
            report["removed"].append(describe(obj))


def _remove_bridges(objs: list[dict], dry_run: bool, require_identity: bool, report: dict) -> None:
    have = bridge_uuids()
    if have is None:  # Open vSwitch is not installed: no bridge can exist
        report["gone"].extend(describe(o) for o in objs)
        return
    doomed = _classify(objs, "uuid", have.get, require_identity, report)
    if dry_run:
        report["removed"].extend(describe(o) for o, _ in doomed)
        return
    ops.delete_bridges([o["name"] for o, _ in doomed])
    try:
        left = bridge_uuids() or {}
    except EmulationError as exc:  # their fate is unknown: keep them in the record
        report["failed"].extend(f"{describe(o)}: {exc}" for o, _ in doomed)
        return
    _attribute(doomed, left.get, "ovs-vsctl del-br", report)


def _remove_links(objs: list[dict], dry_run: bool, require_identity: bool, report: dict) -> None:
    """Root-namespace links, in kernel batches."""
    doomed = _classify(objs, "ifindex", ops.link_index, require_identity, report)
    if dry_run:
        report["removed"].extend(describe(o) for o, _ in doomed)
        return
    ops.delete_links([o["name"] for o, _ in doomed])
    _attribute(doomed, ops.link_index, "ip link del", report)


def _remove_each(objs: list[dict], dry_run: bool, report: dict) -> None:
    """Links inside named namespaces and the namespaces (few: the registry's own probes and veths)."""
    for obj in objs:
        try:
            outcome = _remove_one(obj, dry_run)
        except _STEP_ERRORS as exc:
            report["failed"].append(f"{describe(obj)}: {exc}")
            continue
        report[outcome].append(describe(obj))


def describe(obj: dict) -> str:
    kind = obj.get("kind")
    if kind == "process":
        argv = " ".join(obj.get("argv") or [])[:60]
        return f"process {obj.get('pid')} ({argv})"
    ns = f" in netns {obj['netns']}" if obj.get("netns") else ""
    return f"{kind} {obj.get('name')}{ns}"


def _remove_one(obj: dict, dry_run: bool) -> str:
    """Remove a link in a named namespace or a namespace; returns "removed" or "gone"."""
    kind = obj.get("kind")
    if kind == "link":
        ns = obj["netns"]
        if not ops.netns_exists(ns):
            return "gone"
        index = ops.link_index(obj["name"], ns)
        if index is None or (obj.get("ifindex") and obj["ifindex"] != index):
            return "gone"
        if not dry_run:
            ops.run(ops.in_netns(["ip", "link", "del", obj["name"]], ns), what=f"delete link {obj['name']}",
                    ok_codes=(0, 1))
        return "removed"
    if not ops.netns_exists(obj["name"]):
        return "gone"
    if not dry_run:
        ops.run(["ip", "netns", "del", obj["name"]], what=f"delete netns {obj['name']}")
    return "removed"

def is_running(pid: int, start: float | None) -> bool:
    """``pid`` is the process started at ``start`` and still running: not gone, not a zombie (a zombie
    stays "the same process" until its parent reaps it, though it has exited)."""
    return _alive(pid, start)


def _alive(pid: int, start: float | None) -> bool:
    """Alive and not a zombie (a zombie child is reaped here when it is ours)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        p = psutil.Process(pid)
        return same_process(pid, start) and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


# --------------------------------------------------------------------------------- testbed clean
def live_processes(docs: list[dict]):
    """``(run document, process object, its argv as strings)`` for every process a live run recorded (pure):
    the one walk that finds a running controller or link node from :func:`load_runs`."""
    for doc in docs:
        if not doc.get("alive"):
            continue
        for obj in doc.get("objects", []):
            if obj.get("kind") == "process":
                yield doc, obj, [str(a) for a in obj.get("argv") or []]


def load_runs(root: Path | None = None) -> list[dict]:
    """Every run record under the state directory, with ``alive`` (owner still running) added."""
    runs_dir = (Path(root) if root else state_dir()) / "runs"
    docs = []
    for path in sorted(runs_dir.glob("*.json")) if runs_dir.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            docs.append({"run_id": path.stem, "name": "?", "path": str(path), "alive": False, "objects": [],
                         "error": f"unreadable record: {exc}"})
            continue
        owner = doc.get("owner") or {}
        doc["alive"] = same_process(int(owner.get("pid", 0) or 0), owner.get("start")) \
            if owner.get("pid") else False
        doc["path"] = str(path)
        docs.append(doc)
    return docs


def try_lock(root: Path | None = None) -> int | None:
    """Take the machine-wide lock without waiting: its fd, or None when another run holds it."""
    root = Path(root) if root else state_dir()
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def release_lock(fd: int | None) -> None:
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def clean(*, force: bool = False, dry_run: bool = False) -> list[dict]:
    """What ``testbed clean`` does: :func:`clean_runs` of dead runs (all with ``force``), then the kernel
    settings a dead run changed are put back. While another run holds the lock, objects recorded by name
    only might be that run's, so they are kept."""
    lock = try_lock()
    try:
        reports = clean_runs(only_dead=not force, dry_run=dry_run, require_identity=lock is None)
        if not dry_run:  # kernel settings a killed run changed (each saved with its owner, put back if dead)
            rcu.restore_orphaned(state_dir(), same_process)
            softirq.restore_orphaned(state_dir(), same_process)
            ovssndbuf.restore_orphaned(state_dir(), same_process)
        return reports
    finally:
        release_lock(lock)


def clean_runs(root: Path | None = None, *, only_dead: bool = True, dry_run: bool = False,
               require_identity: bool = False) -> list[dict]:
    """Remove the recorded objects of dead runs (and of live ones unless ``only_dead``).

    Returns one report per run: {"run_id", "name", "alive", "skipped", "removed", "gone", "kept", "failed"}.
    """
    reports = []
    for doc in load_runs(root):
        if doc.get("owner", {}).get("pid") == os.getpid() and doc["alive"]:
            continue  # our own, live record
        report = {"run_id": doc.get("run_id"), "name": doc.get("name"), "alive": doc["alive"],
                  "skipped": False, "removed": [], "gone": [], "kept": [], "failed": []}
        if doc["alive"] and only_dead:
            report["skipped"] = True
            reports.append(report)
            continue
        report.update(remove_objects(doc.get("objects", []), dry_run=dry_run, require_identity=require_identity))
        if not dry_run and not report["failed"] and not report["kept"]:
            Path(doc["path"]).unlink(missing_ok=True)
        reports.append(report)
    return reports
