"""SIGTERM in the middle of building a looped fabric, and while it runs, leaves nothing behind.

A fat-tree k=4 (36 nodes, 48 links: the small version of the k=16 replica whose SIGTERM teardown once left
1,338 links and its run record) is built in a child process; the test sends SIGTERM once some of the
fabric's interfaces exist but before the replica is up (mid-build), or after it is up (mid-run). Then no
recorded object may exist any more, checked against the kernel and OVS directly (not through the run
registry): no node shell (so no Mininet namespace), no OVS bridge, no veth, no named namespace, and no run
record. The teardown must also stay fast (kernel batches, not one grace period per link).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from testbed.emu.registry import same_process, state_dir
from testbed.poll import poll

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]

REPO = Path(__file__).resolve().parents[2]
RUN_NAME = "teardown-signal-test"

# OVS in secure mode towards a port nobody listens on (as `bench build` does): a looped fabric, no storm.
CHILD = textwrap.dedent(f"""
    import sys
    from testbed.emu import Replica
    from testbed.plan import Overrides, plan_replica
    from testbed.plan.alloc import tcp_port_free
    from testbed.topo.generators import fat_tree
    port = next(p for p in range(17653, 18653) if tcp_port_free(p))
    plan = plan_replica(fat_tree(4), overrides=Overrides(links="off"))
    try:
        with Replica(plan, name="{RUN_NAME}", controller=("127.0.0.1", port), wait_connected=0) as rep:
            rep.popen(plan.layout.hosts[0].node, ["sleep", "600"])
            print("READY", flush=True)
            sys.stdin.read()
    except KeyboardInterrupt as exc:  # SIGTERM raises testbed.emu.signals.Terminated, after the teardown
        print("INTERRUPTED", exc, flush=True)
        sys.exit(143)
""")


def _record_path(pid: int) -> Path | None:
    found = sorted((state_dir() / "runs").glob(f"{RUN_NAME}-{pid}-*.json"))
    return found[0] if found else None


def _exists(obj: dict, bridges: set) -> bool:
    kind = obj["kind"]
    if kind == "process":
        stat = Path(f"/proc/{obj['pid']}/stat")
        try:
            zombie = stat.read_text().split(") ")[1][0] == "Z"
        except (OSError, IndexError):
            return False
        return same_process(obj["pid"], obj.get("start")) and not zombie
    if kind == "bridge":
        return obj["name"] in bridges
    if kind == "link":
        return not obj.get("netns") and Path(f"/sys/class/net/{obj['name']}").exists()
    if kind == "netns":
        return Path(f"/run/netns/{obj['name']}").exists()
    raise AssertionError(f"unknown kind {kind}")


def _left(objects: list[dict]) -> list[dict]:
    bridges = set(subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split())
    return [o for o in objects if _exists(o, bridges)]


def _start():
    env = dict(os.environ, TESTBED_LOCK_WAIT=os.environ.get("TESTBED_LOCK_WAIT", "900"))
    return subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _latest_objects(proc) -> tuple[Path, list[dict]]:
    path = poll(lambda: _record_path(proc.pid), timeout=900, interval=0.05, what="the child's run record")
    return path, json.loads(path.read_text())["objects"]


def _signal_and_check(proc, path: Path, objects: list[dict]) -> tuple[float, str]:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    teardown = time.monotonic() - t0
    assert proc.returncode == 143 and "INTERRUPTED signal SIGTERM" in out, (out, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    left = _left(objects)
    assert not left, f"left behind ({len(left)}): {left[:10]}"
    assert not path.exists(), "the run record stayed"
    return teardown, out


def test_sigterm_mid_build_leaves_nothing():
    proc = _start()
    try:
        path = poll(lambda: _record_path(proc.pid), timeout=900, interval=0.02, what="the child's run record")

        def some_links_exist():
            try:
                objects = json.loads(path.read_text())["objects"]
            except (OSError, ValueError):
                return None
            links = [o for o in objects if o["kind"] == "link"]
            made = [o for o in links if Path(f"/sys/class/net/{o['name']}").exists()]
            return objects if len(made) >= 4 else None

        objects = poll(some_links_exist, timeout=300, interval=0.02, what="the first interfaces of the fabric")
        assert proc.poll() is None
        teardown, out = _signal_and_check(proc, path, objects)
        assert "READY" not in out                          # it was signalled before the replica was up
        # Mid-build: the record lists every interface and shell the plan will create before it creates them.
        assert sum(o["kind"] == "link" for o in objects) >= 48 * 2
        assert teardown < 120, f"teardown of a partial k=4 fabric took {teardown:.1f} s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_mid_run_leaves_nothing():
    proc = _start()
    try:
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            proc.kill()
            pytest.fail(f"replica did not start: {line!r} {proc.stderr.read()[-2000:]}")
        path, objects = _latest_objects(proc)
        bridges = [o for o in objects if o["kind"] == "bridge"]
        assert len(bridges) == 20 and all(o.get("uuid") for o in bridges)
        assert len(_left(objects)) > 100                 # the fabric really is there before the signal
        teardown, _ = _signal_and_check(proc, path, objects)
        assert teardown < 120, f"teardown of a k=4 fabric took {teardown:.1f} s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
