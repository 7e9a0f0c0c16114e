"""A replica leaves nothing behind: SIGINT, SIGTERM and SIGHUP (the terminal closed) tear it down; after
SIGKILL `testbed clean` removes exactly what the run recorded (decoys made to look like Mininet objects
survive)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.emu.registry import same_process
from testbed.poll import poll

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]

REPO = Path(__file__).resolve().parents[2]

# Two switches, two hosts, a process started on a host: prints the record path, then waits.
CHILD = textwrap.dedent("""
    import sys, networkx as nx
    from testbed.emu import Replica
    from testbed.plan import Overrides, plan_replica
    G = nx.Graph()
    for n, role in (("h1", "host"), ("h2", "host"), ("s1", "leaf"), ("s2", "leaf")):
        G.add_node(n, role=role)
    G.add_edge("h1", "s1", ports={"h1": 1, "s1": 2})
    G.add_edge("s1", "s2", ports={"s1": 1, "s2": 1})
    G.add_edge("s2", "h2", ports={"s2": 2, "h2": 1})
    with Replica(plan_replica(G, overrides=Overrides(links="off")), name="emu-cleanup-test") as rep:
        out = rep.host("h1").cmd("ping -c1 -W5", rep.ip("h2"))
        assert " 0% packet loss" in out, out
        rep.popen("h2", ["sleep", "600"])
        print("READY", rep.run.path, flush=True)
        sys.stdin.read()
""")



def _hangup_default() -> None:
    """The child's SIGHUP and SIGINT at their defaults, as a terminal's foreground job has them: a replica keeps
    an inherited SIG_IGN (it was started with nohup, testbed.emu.signals), and a suite started under nohup, or
    in the background of a non-interactive shell (`cmd &` ignores SIGINT there; Python then leaves it
    ignored), would otherwise test nothing (the CI of 3c61ce5, started that way, failed here on SIGINT)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)

def _start_child():
    env = dict(os.environ, TESTBED_LOCK_WAIT=os.environ.get("TESTBED_LOCK_WAIT", "900"))
    proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_hangup_default)
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        pytest.fail(f"replica did not start: {line!r} {proc.stderr.read()[-2000:]}")
    record = json.loads(Path(line.split()[1]).read_text())
    return proc, Path(line.split()[1]), record


def _exists(obj) -> bool:
    kind = obj["kind"]
    if kind == "process":
        return same_process(obj["pid"], obj.get("start")) and _not_zombie(obj["pid"])
    if kind == "bridge":
        return subprocess.run(["ovs-vsctl", "br-exists", obj["name"]]).returncode == 0
    if kind == "link":
        return Path(f"/sys/class/net/{obj['name']}").exists()
    if kind == "netns":
        return Path(f"/run/netns/{obj['name']}").exists()
    raise AssertionError(kind)


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _assert_all_gone(record):
    kinds = {o["kind"] for o in record["objects"]}
    assert {"process", "bridge", "link"} <= kinds, kinds
    left = [o for o in record["objects"] if _exists(o)]
    assert not left, f"left behind: {left}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_tears_everything_down(sig):
    proc, path, record = _start_child()
    assert all(_exists(o) for o in record["objects"] if o["kind"] in ("process", "bridge"))
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    _assert_all_gone(record)
    assert not path.exists()


def test_clean_after_sigkill_removes_only_recorded_objects():
    decoy_a, decoy_b, decoy_br = "emudcy-eth1", "emudcy-eth2", "emudcybr"
    subprocess.run(["ip", "link", "add", decoy_a, "type", "veth", "peer", "name", decoy_b], check=True)
    decoy_proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        subprocess.run(["ovs-vsctl", "add-br", decoy_br, "--", "set", "bridge", decoy_br,
                        "datapath_type=netdev"], check=True)
        proc, path, record = _start_child()
        proc.kill()
        proc.wait(timeout=10)
        assert path.exists()
        assert any(_exists(o) for o in record["objects"]), "SIGKILL should leave objects for clean"
        res = subprocess.run([sys.executable, "-m", "testbed.cli", "clean", "--json"], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        report = json.loads(res.stdout)
        assert not any(r["failed"] for r in report["runs"])
        poll(lambda: not any(_exists(o) for o in record["objects"]), timeout=10, what="objects to go")
        _assert_all_gone(record)
        assert not path.exists()
        assert Path(f"/sys/class/net/{decoy_a}").exists()
        assert subprocess.run(["ovs-vsctl", "br-exists", decoy_br]).returncode == 0
        assert decoy_proc.poll() is None
    finally:
        decoy_proc.kill()
        decoy_proc.wait()
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", decoy_br])
        subprocess.run(["ip", "link", "del", decoy_br], capture_output=True)
        subprocess.run(["ip", "link", "del", decoy_a], capture_output=True)
