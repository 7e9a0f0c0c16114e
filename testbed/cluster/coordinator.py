"""The coordinator of a partitioned replica (root glue on this machine, SSH to the workers).

    with Cluster(spec_path, workers, out_dir, ssh=SshOptions(...)) as cl:   # built, started, synchronised
        cl.exec("h0", ["ping", "-c1", cl.ip("h9")])                         # on whichever worker holds h0
    # left in any way (normal, exception, Ctrl-C, a lost worker): every worker torn down, results pulled

Start-up, linear and logged::

    connect every worker (strict host keys, keys only)  -- one bad worker: nothing was started anywhere
    probe every worker's capabilities (all at once) -> meet -> plan_replica(G, meet, overrides) -> digest
    partition(G, n) -> cut links, VNIs
    fabric controller here, on 127.0.0.1 (its own run registry entry)
    per worker (all at once): mktemp -d; push job.json; remote forward 127.0.0.1:<p> -> our controller;
                start `python -m testbed.cluster.worker run job.json` (events/commands as JSON lines)
    wait: every worker `ready`  -> controller ready (every switch of every part connected)
    barrier: `go` to all        -> every worker `started`

Teardown: `stop` to every worker still there, wait for `stopped`, pull its results folder into
``out_dir/<worker>/`` (plan.json of its part, replica.json, tunnels.json, logs; its streamed stderr is
``worker.log``), remove its temporary folder, close SSH; then the controller. A worker whose SSH session
ends early is *lost*: :class:`WorkerLost` is raised in the coordinator at its next wait, which tears the
others down; on the lost machine, when it is still reachable, ``testbed clean`` removes what its run
registry recorded (a worker that exits on its own has already torn down).
"""

from __future__ import annotations

import json
import queue
import shlex
import sys
import threading
import time
from pathlib import Path

from rich.markup import escape

from testbed.cluster.ssh import SshError, SshOptions, connect
from testbed.console import console
from testbed.errors import EmulationError, SpecError, TestbedError
from testbed.topo.workers import require_underlays

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 600.0      # a TCG guest builds half a k=4 fat-tree in minutes
STOP_TIMEOUT = 180.0


class WorkerLost(EmulationError):
    """A worker's SSH session or worker process ended while the replica was up."""


class WorkerFailed(EmulationError):
    """A worker reported an error (its message is carried)."""


class RemoteWorker:
    """One worker: its connection, its worker process channel and the events it sent."""

    def __init__(self, index: int, spec, conn, out_dir: Path, any_ended: threading.Event | None = None):
        self.index, self.spec, self.conn = index, spec, conn
        self.any_ended = any_ended or threading.Event()
        self.label = f"w{index} {spec.label}"
        self.out_dir = out_dir / f"w{index}"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.events: queue.Queue = queue.Queue()
        self.chan = None
        self.tmp: str | None = None
        self.ended = threading.Event()
        self.stopped = False
        self.ready: dict | None = None
        self.exit_status: int | None = None
        self._send_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    @property
    def python(self) -> str:
        return self.spec.python or sys.executable

    @property
    def checkout(self) -> str:
        return self.spec.checkout or str(REPO)

    def command(self, *args: str) -> str:
        return f"cd {shlex.quote(self.checkout)} && {shlex.quote(self.python)} -m testbed.cluster.worker " + \
            " ".join(shlex.quote(a) for a in args)

    def start(self, *args: str) -> None:
        self.chan = self.conn.start(self.command(*args))
        out = threading.Thread(target=self._read_events, daemon=True, name=f"events-{self.index}")
        err = threading.Thread(target=self._read_log, daemon=True, name=f"log-{self.index}")
        self._threads = [out, err]
        out.start()
        err.start()

    def _read_events(self) -> None:
        try:
            for line in self.chan.makefile("r"):
                try:
                    self.events.put(json.loads(line))
                except ValueError:
                    self.events.put({"event": "noise", "line": line.rstrip()})
        except (OSError, EOFError):
            pass
        finally:
            try:
                self.exit_status = self.chan.recv_exit_status() if self.chan.exit_status_ready() else None
            except Exception:  # noqa: BLE001 - the transport is gone
                self.exit_status = None
            self.ended.set()
            self.any_ended.set()
            self.events.put({"event": "ended"})

    def _read_log(self) -> None:
        with open(self.out_dir / "worker.log", "a") as log:
            try:
                for line in self.chan.makefile_stderr("r"):
                    log.write(line)
                    log.flush()
                    console.print(f"[dim]{escape(self.label)}: {escape(line.rstrip())}[/dim]", highlight=False)
            except (OSError, EOFError):
                pass

    def send(self, **cmd) -> bool:
        """One command line to the worker; False when its channel is gone."""
        with self._send_lock:
            try:
                self.chan.sendall((json.dumps(cmd) + "\n").encode())
                return True
            except (OSError, EOFError, AttributeError):
                return False
            except Exception:  # noqa: BLE001 - paramiko raises SSHException on a dead channel
                return False

    def close_stdin(self) -> None:
        try:
            self.chan.shutdown_write()
        except Exception:  # noqa: BLE001 - already closed
            pass


class Cluster:
    """A replica partitioned over ``workers``; a context manager that always tears every part down.

    Args:
        spec_path: the fabric spec (YAML) every worker builds its part of.
        workers: :class:`~testbed.topo.workers.WorkerSpec`, worker 0 first.
        out_dir: the one results folder (``w<i>/`` per worker, ``cluster.json``, controller log).
        overrides: :class:`testbed.plan.Overrides` (``static_arp`` is forced off: the controller answers ARP).
        ssh: :class:`SshOptions`.
        imbalance: tolerated load imbalance of the partition.
        dry_run: workers plan and describe their part without building it (no root anywhere).
        controller: ``(ip, port)`` of a controller to forward to instead of starting the fabric controller.
        ready_timeout: seconds for every worker to build its part.
    """

    def __init__(self, spec_path: Path, workers, out_dir: Path, *, overrides=None, ssh: SshOptions | None = None,
                 imbalance: float = 0.10, dry_run: bool = False, controller: tuple[str, int] | None = None,
                 ready_timeout: float = READY_TIMEOUT, name: str | None = None):
        if not workers:
            raise SpecError("cluster.workers", "no workers: give --workers user@host1,user@host2 or cluster: in the spec")
        require_underlays(workers)
        self.spec_path, self.specs, self.out_dir = Path(spec_path), tuple(workers), Path(out_dir)
        self.overrides, self.ssh = overrides, ssh or SshOptions()
        self.imbalance, self.dry_run = imbalance, dry_run
        self.controller_address = controller
        self.ready_timeout = ready_timeout
        self.name = name
        self.workers: list[RemoteWorker] = []
        self.plan = self.partition = self.graph = None
        self.ctl = None
        self.run = None
        self._ids = iter(range(1, 1 << 62))
        self._pending: dict[int, dict] = {}
        self.timings: dict[str, float] = {}
        self.lost: list[str] = []
        self._any_ended = threading.Event()
        self._signals = None
        self._sink = None

    # ------------------------------------------------------------------------------------------ start-up
    def __enter__(self) -> Cluster:
        from testbed.emu.signals import terminate_raises

        self._signals = terminate_raises()   # SIGTERM/SIGHUP unwind like Ctrl-C: every worker torn down
        self._signals.__enter__()
        try:
            self._start()
        except BaseException:
            self._exit()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._exit()

    def _exit(self) -> None:
        try:
            self._teardown()
        finally:
            if self._signals is not None:
                self._signals.__exit__(None, None, None)
                self._signals = None

    def _start(self) -> None:
        from dataclasses import replace

        from testbed.cluster.partition import partition
        from testbed.cluster.parts import (
            capabilities_from_json,
            capabilities_json,
            check_cut,
            meet,
            overrides_json,
            plan_digest,
        )
        from testbed.plan import Overrides, plan_replica
        from testbed.topo.spec import build_graph, load_spec

        t0 = time.monotonic()
        spec_text = self.spec_path.read_text()
        spec = load_spec(self.spec_path)
        G = build_graph(spec)
        self.name = self.name or spec.name
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # Every connection first, all at once: a bad worker starts nothing anywhere.
        conns = each(lambda iw: connect(iw[1], self.ssh, field=f"cluster.workers[{iw[0]}]"),
                     list(enumerate(self.specs)),
                     keep=lambda i, conn: self.workers.append(
                         RemoteWorker(i, self.specs[i], conn, self.out_dir, self._any_ended)))
        console.print(f"[dim]cluster: {len(conns)} workers connected[/dim]")

        def probe(w: RemoteWorker):
            out = w.conn.check(w.command("probe", *(["--assume"] if self.dry_run else [])), timeout=180)
            return capabilities_from_json(_last_event(out, "capabilities", w.label)["capabilities"])

        t_probe = time.monotonic()
        capabilities = meet(each(probe, self.workers))   # in parallel: a TCG guest's probe takes ~10 s
        self.timings["probe_s"] = time.monotonic() - t_probe
        ov = replace(self.overrides or Overrides(), static_arp=False)
        self.plan = plan_replica(G, capabilities, ov)
        self.graph = self.plan.graph
        self.partition = partition(G, len(self.workers), self.imbalance)
        check_cut(self.plan, self.partition)
        digest = plan_digest(self.plan)
        self.timings["plan_s"] = time.monotonic() - t0
        console.print(f"[dim]cluster: {self.plan.summary_line()}; {len(self.partition.cut)} links cut "
                      f"({self.partition.cut_capacity_bps / 1e9:g} Gbit/s real), load spread "
                      f"{self.partition.load_spread():.3f}[/dim]")
        self._start_controller(G)
        job = {"protocol": 1, "name": _safe(self.name), "spec": spec_text, "overrides": overrides_json(ov),
               "capabilities": capabilities_json(capabilities), "plan_digest": digest,
               "partition": self.partition.to_json(),
               "workers": [{"label": w.label, "underlay": w.spec.underlay} for w in self.workers]}
        (self.out_dir / "cluster.json").write_text(json.dumps(
            {"name": self.name, "plan_digest": digest, "partition": self.partition.to_json(),
             "workers": job["workers"], "capabilities": capabilities.to_json()}, indent=1) + "\n")
        t1 = time.monotonic()

        def launch(w: RemoteWorker) -> None:
            w.tmp = w.conn.check("mktemp -d /tmp/scaleout-cluster-XXXXXX").decode().strip()
            port = w.conn.forward_remote(self.controller_address[1], self.controller_address[0])
            doc = {**job, "index": w.index, "controller_port": port, "out_dir": f"{w.tmp}/out"}
            w.conn.put_bytes(json.dumps(doc).encode(), f"{w.tmp}/job.json")
            w.start("run", f"{w.tmp}/job.json", *(["--dry-run"] if self.dry_run else []))

        each(launch, self.workers)
        for w in self.workers:
            w.ready = self._wait_event(w, "ready", self.ready_timeout)
            for note in w.ready.get("notes", []):
                console.print(f"[yellow]{w.label}: {note}[/yellow]")
        self.timings["build_s"] = time.monotonic() - t1
        if self.ctl is not None:
            self.ctl.wait_ready(timeout=self.ready_timeout)   # every switch of every part connected
        for w in self.workers:   # the start barrier
            if not w.send(cmd="go"):
                raise WorkerLost(f"{w.label}: lost before the start barrier; see {w.out_dir / 'worker.log'}")
        for w in self.workers:
            self._wait_event(w, "started", 60)
        self.timings["up_s"] = time.monotonic() - t0
        console.print(f"[dim]cluster: up in {self.timings['up_s']:.1f} s (workers probed in "
                      f"{self.timings['probe_s']:.1f} s, parts built in {self.timings['build_s']:.1f} s)[/dim]")

    def _start_controller(self, G) -> None:
        if self.controller_address is not None:
            return
        if self.dry_run:   # no switch will connect: a loopback sink takes the workers' test connections
            self._sink = _Sink()
            self.controller_address = ("127.0.0.1", self._sink.port)
            return
        from controllers.launch import start_controller
        from testbed.emu import RunRegistry

        # No machine lock: the controller uses no global names, and this machine may be a worker too.
        self.run = RunRegistry(f"cluster-{_safe(self.name)}-controller", exclusive=False).__enter__()
        self.ctl = start_controller(self.run, G, self.out_dir)
        self.controller_address = self.ctl.address

    # ------------------------------------------------------------------------------------------ use
    def worker_of(self, node) -> RemoteWorker:
        by_name = {str(n): n for n in self.graph.nodes}
        if str(node) not in by_name:
            raise SpecError("node", f"no node {node!r} in the fabric")
        return self.workers[self.partition.assign[by_name[str(node)]]]

    def ip(self, host) -> str:
        return self.plan.layout.host(host).ip

    def exec(self, node, argv, timeout: float = 60.0) -> tuple[int, str]:
        """Run ``argv`` on ``node`` (in its namespace, on its worker). Returns (rc, output)."""
        return self.exec_many([(node, argv)], timeout)[0]

    def exec_many(self, jobs, timeout: float = 60.0) -> list[tuple[int, str]]:
        """Run several (node, argv) at once (across workers). Returns [(rc, output)] in order."""
        ids = []
        for node, argv in jobs:
            w = self.worker_of(node)
            cid = next(self._ids)
            if not w.send(cmd="exec", id=cid, node=str(node), argv=[str(a) for a in argv], timeout=timeout):
                raise WorkerLost(f"{w.label}: lost (its channel is closed); see {w.out_dir / 'worker.log'}")
            ids.append((w, cid))
        deadline = time.monotonic() + timeout + 30
        results = []
        for w, cid in ids:
            ev = self._wait_result(w, cid, deadline)
            results.append((int(ev["rc"]), ev.get("output", "")))
        return results

    def check_alive(self) -> None:
        """Raise :class:`WorkerLost` when any worker's session ended."""
        for w in self.workers:
            if w.ended.is_set() and not w.stopped:
                self._lose(w)
            if not w.conn.alive():
                self._lose(w)

    def hold(self, interval: float = 1.0) -> None:
        """Stay up until Ctrl-C/SIGTERM (raised here) or a lost worker (WorkerLost). A worker's end wakes
        this at once; ``interval`` only bounds how late a silently dead SSH transport is noticed."""
        while True:
            self.check_alive()
            self._any_ended.wait(interval)

    # ------------------------------------------------------------------------------------------ events
    def _lose(self, w: RemoteWorker) -> None:
        if w.label not in self.lost:
            self.lost.append(w.label)
        raise WorkerLost(f"{w.label}: lost (worker exit {w.exit_status}); the other workers are torn down; "
                         f"its log: {w.out_dir / 'worker.log'}")

    def _next(self, w: RemoteWorker, deadline: float, what: str) -> dict:
        while True:
            self._check_others(w)
            left = deadline - time.monotonic()
            if left <= 0:
                raise EmulationError(f"{w.label}: no {what} within the timeout; see {w.out_dir / 'worker.log'}")
            try:
                ev = w.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if ev.get("event") == "error":
                raise WorkerFailed(f"{w.label}: {ev.get('message')}") if ev.get("exit_code") != 2 else \
                    SpecError(f"cluster.workers[{w.index}]", str(ev.get("message")))
            if ev.get("event") == "ended":
                w.events.put(ev)   # stays ended for later waits
                self._lose(w)
            if ev.get("event") == "result":
                self._pending[ev["id"]] = ev
            return ev

    def _check_others(self, current: RemoteWorker) -> None:
        for w in self.workers:
            if w is not current and w.ended.is_set() and not w.stopped:
                self._lose(w)

    def _wait_event(self, w: RemoteWorker, name: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            ev = self._next(w, deadline, f"`{name}`")
            if ev.get("event") == name:
                return ev

    def _wait_result(self, w: RemoteWorker, cid: int, deadline: float) -> dict:
        while cid not in self._pending:
            self._next(w, deadline, f"result of command {cid}")
        return self._pending.pop(cid)

    # ------------------------------------------------------------------------------------------ teardown
    def _teardown(self) -> None:
        from testbed.emu.signals import deferred_signals

        with deferred_signals():
            for w in self.workers:
                if w.chan is not None and not w.ended.is_set():
                    w.send(cmd="stop")
                    w.close_stdin()
            for w in self.workers:
                self._stop_one(w)
            if self.ctl is not None:
                self.ctl.stop()
            if self._sink is not None:
                self._sink.close()
            if self.run is not None:
                self.run.__exit__(None, None, None)
                self.run = None

    def _stop_one(self, w: RemoteWorker) -> None:
        if w.chan is not None:
            if not w.ended.wait(STOP_TIMEOUT):
                console.print(f"[yellow]{w.label}: did not stop within {STOP_TIMEOUT:.0f} s; closing its session "
                              "(the worker tears down on EOF)[/yellow]")
            w.stopped = True
            if w.exit_status not in (0, None) or w.label in self.lost:
                self._clean_lost(w)
        if w.tmp and w.conn.alive():
            try:
                n = w.conn.get_tree(f"{w.tmp}/out", w.out_dir)
                console.print(f"[dim]{w.label}: {n} result files in {w.out_dir}[/dim]")
            except TestbedError as exc:
                console.print(f"[yellow]{w.label}: results not pulled: {exc}[/yellow]")
            try:
                w.conn.run(f"rm -rf {shlex.quote(w.tmp)}", timeout=60)
            except TestbedError:
                pass
        w.conn.close()

    def _clean_lost(self, w: RemoteWorker) -> None:
        """A worker that died without tearing down: `testbed clean` there (spares live runs)."""
        if not w.conn.alive() or self.dry_run:
            return
        try:
            rc, out, err = w.conn.run(f"cd {shlex.quote(w.checkout)} && {shlex.quote(w.python)} -m testbed.cli clean",
                                      timeout=300)
            (w.out_dir / "clean.log").write_bytes(out + err)
            console.print(f"[dim]{w.label}: testbed clean exited {rc}[/dim]")
        except (SshError, OSError) as exc:
            console.print(f"[yellow]{w.label}: testbed clean failed: {exc}[/yellow]")


class _Sink:
    """A listener on 127.0.0.1 that accepts and drains connections (the dry run's stand-in controller)."""

    def __init__(self):
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True, name="dry-run-sink").start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                while conn.recv(4096):
                    pass

    def close(self) -> None:
        self.sock.close()


def each(fn, items: list, keep=None) -> list:
    """``[fn(x) for x in items]`` with every call at once (one thread each: the workers are remote and
    their waits overlap), in order. All calls finish before anything is raised; then the error of the
    first failed item is raised, so which worker is named does not depend on timing. ``keep(i, result)``
    is called, in order, for every call that succeeded, also when another failed (to close what opened)."""
    results: list = [None] * len(items)
    errors: list = [None] * len(items)

    def run(i: int) -> None:
        try:
            results[i] = fn(items[i])
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,), name=f"cluster-each-{i}", daemon=True)
               for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if keep is not None:
        for i, exc in enumerate(errors):
            if exc is None:
                keep(i, results[i])
    for exc in errors:
        if exc is not None:
            raise exc
    return results


def _last_event(out: bytes, name: str, label: str) -> dict:
    for line in reversed(out.decode(errors="replace").splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("event") == name:
            return doc
        if doc.get("event") == "error":
            raise WorkerFailed(f"{label}: {doc.get('message')}")
    raise WorkerFailed(f"{label}: the worker printed no `{name}` event (is the testbed installed there?)")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in str(name))[:32] or "cluster"
