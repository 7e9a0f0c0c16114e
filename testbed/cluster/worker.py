"""The worker side of a partitioned replica (root glue), started by the coordinator over SSH.

    python -m testbed.cluster.worker probe [--assume]     # this machine's capabilities, one JSON line
    python -m testbed.cluster.worker run JOB [--dry-run]  # build this worker's part, then obey stdin

``run`` speaks JSON lines: events on stdout, commands on stdin, logs (the replica's progress) on stderr,
which the coordinator streams into ``<results>/<worker>/worker.log``::

    coordinator                                worker
    job.json (pushed) ----------------------->  plan = plan_replica(spec, capabilities, overrides)
                      <-- {"event":"planned"}   digest == job's digest? (same code, same plan)
                                                RunRegistry + Replica(part) + VXLAN tunnel ports
                      <-- {"event":"ready"}     switches connect to 127.0.0.1:<forwarded port>
    {"cmd":"go"}      ------------------------>  start barrier: commands are refused before it
                      <-- {"event":"started"}
    {"cmd":"exec","id":7,"node":"h3","argv":[...],"timeout":30}
                      <-- {"event":"result","id":7,"rc":0,"output":"..."}
    {"cmd":"stop"} or EOF on stdin ---------->  leave the Replica and the registry: all torn down
                      <-- {"event":"stopped"}

EOF on stdin means the coordinator is gone (its SSH session closed): the part tears itself down, so a
lost coordinator never leaves a half-fabric running. SIGTERM/SIGHUP unwind the same way (the run
registry's handlers); after SIGKILL, ``testbed clean`` on this machine removes what the registry recorded.
``--dry-run`` does everything but build (no root): it plans, prints the tunnel commands it would run and
connects once to the forwarded controller port, so the SSH orchestration is testable without root.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed.errors import EmulationError, SpecError, TestbedError

PROTOCOL = 1
MAX_OUTPUT = 64 * 1024


class Events:
    """JSON lines on stdout, one writer at a time; a closed pipe (coordinator gone) is not an error."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.lock = threading.Lock()
        self.closed = False

    def emit(self, event: str, **fields) -> None:
        line = json.dumps({"event": event, **fields}, default=str)
        with self.lock:
            if self.closed:
                return
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.closed = True


def log(text: str) -> None:
    try:
        print(text, file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError, ValueError):
        pass


def load_job(path: Path) -> dict:
    job = json.loads(Path(path).read_text())
    if job.get("protocol") != PROTOCOL:
        raise SpecError("job.protocol", f"the coordinator speaks protocol {job.get('protocol')!r}, this worker "
                                        f"{PROTOCOL}: run the same testbed version on every machine")
    return job


def plan_part(job: dict, work: Path):
    """(full plan, part plan, partition) of this worker, from the job (pure once the spec is written)."""
    from testbed.cluster.partition import partition_from_json
    from testbed.cluster.parts import capabilities_from_json, overrides_from_json, part_plan, plan_digest
    from testbed.plan import plan_replica
    from testbed.topo.spec import build_graph, load_spec

    spec_path = work / "spec.yaml"
    spec_path.write_text(job["spec"])
    G = build_graph(load_spec(spec_path))
    plan = plan_replica(G, capabilities_from_json(job["capabilities"]), overrides_from_json(job["overrides"]))
    digest = plan_digest(plan)
    if digest != job["plan_digest"]:
        raise SpecError("job.plan_digest", f"this worker computes plan {digest}, the coordinator {job['plan_digest']}: "
                                           "run the same testbed version on every machine")
    part = partition_from_json(job["partition"], G)
    return plan, part_plan(plan, part, job["index"]), part


def underlay_note(remote_ip: str, mtu: int) -> str | None:
    """A note when the route to ``remote_ip`` has an MTU below ``mtu`` + the VXLAN headers."""
    from testbed.cluster.parts import VXLAN_OVERHEAD

    res = subprocess.run(["ip", "-o", "route", "get", remote_ip], capture_output=True, text=True)
    words = res.stdout.split()
    if res.returncode != 0 or "dev" not in words:
        raise EmulationError(f"no route to the underlay address {remote_ip} of a peer worker: "
                             f"{res.stderr.strip() or res.stdout.strip()}")
    dev = words[words.index("dev") + 1]
    try:
        have = int(Path(f"/sys/class/net/{dev}/mtu").read_text())
    except (OSError, ValueError):
        return None
    if have < mtu + VXLAN_OVERHEAD:
        return (f"underlay {dev} has MTU {have} < {mtu + VXLAN_OVERHEAD}: full-size frames are fragmented "
                "on the underlay")
    return None


class Part:
    """This worker's part, built (or, dry, only described)."""

    def __init__(self, job: dict, events: Events, dry_run: bool):
        self.job, self.events, self.dry_run = job, events, dry_run
        self.out = Path(job["out_dir"])
        self.rep = None
        self.started = threading.Event()
        # Commands wait in their thread (an iperf3 server until its client is done): one part may hold
        # every host of the fabric, each with a client, a server and a sampler at once.
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="exec")

    def tunnel_commands(self, pp) -> list[list[str]]:
        from testbed.cluster.parts import tunnel_argv

        workers = self.job["workers"]
        me = workers[self.job["index"]]
        argv = []
        for t in pp.tunnels:
            argv += tunnel_argv(t, me["underlay"], workers[t.peer_worker]["underlay"], pp.plan.mtu)
        return argv

    def serve(self) -> int:
        import os

        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "worker.pid").write_text(f"{os.getpid()}\n")
        plan, pp, part = plan_part(self.job, self.out)
        if any(s.kind != "ovs" for s in plan.switches):
            raise SpecError("cluster", "a partitioned replica runs Open vSwitch switches under the fabric "
                                       "controller; BMv2 and external switches are not supported across machines yet")
        self.events.emit("planned", digest=self.job["plan_digest"], nodes=len(pp.plan.layout.hosts)
                         + len(pp.plan.layout.switches), tunnels=len(pp.tunnels))
        commands = self.tunnel_commands(pp)
        if self.dry_run:
            reached = self._touch_controller()
            self.events.emit("ready", dry_run=True, commands=commands, controller_reached=reached,
                             hosts=[h.name for h in pp.plan.layout.hosts], notes=[])
            return self._loop()
        return self._build_and_loop(pp, commands)

    def _touch_controller(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.job["controller_port"]), timeout=10) as s:
                s.sendall(f"dry-run worker {self.job['index']}\n".encode())
            return True
        except OSError as exc:
            log(f"worker: controller port {self.job['controller_port']} not reachable: {exc}")
            return False

    def _build_and_loop(self, pp, commands) -> int:
        from testbed.console import require_root
        from testbed.emu import Replica, RunRegistry, ops
        from testbed.links.node import DelayLineNode

        require_root("a cluster worker")
        notes = []
        workers = self.job["workers"]
        for peer in sorted({t.peer_worker for t in pp.tunnels}):
            note = underlay_note(workers[peer]["underlay"], pp.plan.mtu)
            if note:
                notes.append(note)
                log(f"worker: {note}")
        name = f"cluster-{self.job['name']}-w{self.job['index']}"
        with RunRegistry(name) as run:
            with Replica(pp.plan, controller=("127.0.0.1", int(self.job["controller_port"])), out_dir=self.out,
                         name=name, run=run, link_node_class=DelayLineNode,
                         wait_connected=float(self.job.get("connect_timeout", 120))) as rep:
                self.rep = rep
                recorded = [run.record_link(t.intf) for t in pp.tunnels]   # before creating them
                for argv in commands:
                    ops.run(argv, what=f"set up tunnel ({' '.join(argv[:4])})", timeout=30)
                for obj in recorded:   # by ifindex too, so `testbed clean` removes them while others run
                    obj["ifindex"] = ops.link_index(obj["name"])
                run.save()
                (self.out / "tunnels.json").write_text(json.dumps(
                    [{"intf": t.intf, "vni": t.vni, "node": str(t.node), "peer": str(t.peer), "port": t.port,
                      "peer_worker": t.peer_worker, "backend": t.backend} for t in pp.tunnels], indent=1) + "\n")
                self.events.emit("ready", dry_run=False, run_id=run.run_id, notes=notes,
                                 hosts=[h.name for h in pp.plan.layout.hosts])
                return self._loop()

    def _loop(self) -> int:
        """Obey stdin until ``stop`` or EOF (the coordinator is gone)."""
        reason = "eof"
        try:
            for line in sys.stdin:
                try:
                    cmd = json.loads(line)
                except ValueError:
                    log(f"worker: ignoring a line that is not JSON: {line[:80]!r}")
                    continue
                what = cmd.get("cmd")
                if what == "stop":
                    reason = "stop"
                    break
                if what == "go":
                    self.started.set()
                    self.events.emit("started")
                elif what == "exec":
                    self.pool.submit(self._exec, cmd)
                else:
                    log(f"worker: unknown command {what!r}")
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)
            log(f"worker: tearing down ({'the coordinator asked' if reason == 'stop' else 'stdin closed'})")
        return 0

    def _exec(self, cmd: dict) -> None:
        cid = cmd.get("id")
        if not self.started.is_set():
            self.events.emit("result", id=cid, rc=125, output="refused: the start barrier (go) has not passed")
            return
        node, argv, timeout = cmd.get("node"), [str(a) for a in cmd.get("argv", [])], float(cmd.get("timeout", 60))
        if self.dry_run or self.rep is None:
            self.events.emit("result", id=cid, rc=0, output=f"dry-run: {node}: {' '.join(argv)}")
            return
        by_name = {str(n): n for n in self.rep.G.nodes}
        if node not in by_name or by_name[node] not in self.rep._nodes:
            self.events.emit("result", id=cid, rc=126, output=f"node {node!r} is not on this worker")
            return
        try:
            proc = self.rep.node(by_name[node]).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                      text=True)
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
                self.events.emit("result", id=cid, rc=124, output=(out or "")[-MAX_OUTPUT:] + "\n(timed out)")
                return
            self.events.emit("result", id=cid, rc=proc.returncode, output=(out or "")[-MAX_OUTPUT:])
        except Exception as exc:  # noqa: BLE001 - reported to the coordinator, which decides
            self.events.emit("result", id=cid, rc=127, output=f"{type(exc).__name__}: {exc}")


def probe(assume: bool) -> dict:
    from testbed.cluster.parts import capabilities_json
    from testbed.plan import ASSUMED
    from testbed.plan.alloc import tcp_ports_in_use

    if assume:
        from dataclasses import replace

        return capabilities_json(replace(ASSUMED, tcp_ports_in_use=tcp_ports_in_use()))
    from testbed.console import require_root
    from testbed.doctor import plan_capabilities

    require_root("the cluster worker's capability probe")
    return capabilities_json(plan_capabilities())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.cluster.worker", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--assume", action="store_true", help="do not probe (no root): the portable capabilities")
    r = sub.add_parser("run")
    r.add_argument("job", type=Path)
    r.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    events = Events()
    try:
        if args.verb == "probe":
            events.emit("capabilities", capabilities=probe(args.assume))
            return 0
        part = Part(load_job(args.job), events, args.dry_run)
        rc = part.serve()
        events.emit("stopped")
        return rc
    except TestbedError as exc:
        events.emit("error", message=str(exc), exit_code=exc.exit_code)
        log(f"worker: {exc}")
        return exc.exit_code
    except KeyboardInterrupt as exc:
        events.emit("stopped", signal=str(exc))
        return 130


if __name__ == "__main__":
    sys.exit(main())
