"""`testbed up` keeps a replica of any spec up: its shell answers Mininet's verbs, `exec`/`ls`/`down` work
from other processes, and closing the terminal (SIGHUP) tears everything down like `down` does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.emu.registry import same_process
from testbed.poll import poll

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]

REPO = Path(__file__).resolve().parents[2]

# Loop-free (OVS standalone, no controller): four hosts under two leaves and one spine.
SPEC = """\
name: up-test
kind: spine-leaf
params: {leaves: 2, spines: 1, hosts_per_leaf: 2}
links:
  default: {rate: 10G}
scale: 100
"""


def _env():
    return dict(os.environ, TESTBED_LOCK_WAIT=os.environ.get("TESTBED_LOCK_WAIT", "900"), PYTHONPATH=str(REPO))


def _testbed(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=kwargs.pop("timeout", 120), **kwargs)


@pytest.fixture
def spec(tmp_path):
    p = tmp_path / "up-test.yaml"
    p.write_text(SPEC)
    return p


def _objects_left(record: dict) -> list:
    """Recorded objects that still exist, checked with the kernel and OVS directly (not the registry)."""
    left = []
    bridges = set(subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split())
    for o in record["objects"]:
        if o["kind"] == "process" and same_process(o["pid"], o.get("start")):
            state = Path(f"/proc/{o['pid']}/stat").read_text().split(") ")[1][0] if Path(f"/proc/{o['pid']}").exists() else "Z"
            if state != "Z":
                left.append(o)
        elif o["kind"] == "bridge" and o["name"] in bridges:
            left.append(o)
        elif o["kind"] == "link" and not o.get("netns") and Path(f"/sys/class/net/{o['name']}").exists():
            left.append(o)
        elif o["kind"] == "netns" and Path(f"/run/netns/{o['name']}").exists():
            left.append(o)
    return left



def _hangup_default() -> None:
    """The child's SIGHUP at its default: a replica keeps an inherited SIG_IGN (it was started with nohup,
    testbed.emu.signals), and a test suite itself run under nohup would otherwise test nothing."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

def _start_waiting(spec, out, *flags):
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "up", str(spec), "--wait", "--out", str(out),
                             *flags],
                            cwd=REPO, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_hangup_default)

    def up():
        if proc.poll() is not None:
            raise AssertionError(f"testbed up exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
        res = _testbed("ls", "--json")
        doc = json.loads(res.stdout)["replica"]
        return doc if doc and doc["pid"] == proc.pid else None

    doc = poll(up, timeout=900, interval=0.5, what="testbed up to bring the replica up")
    record = json.loads(next(Path("/run/scaleout-testbed/runs").glob(f"{doc['run_id']}.json")).read_text())
    return proc, doc, record


def test_shell_verbs_from_stdin(spec, tmp_path):
    script = "\n".join(["nodes", "h0 ping -c1 -W5 h3", "pingall", "fail l0 s0", "pingall", "restore l0 s0",
                        "pingall", "links", "no-such-verb", "exit"]) + "\n"
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "up", str(spec), "--out", str(tmp_path / "out")],
                         cwd=REPO, env=_env(), input=script, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    assert "1 received" in out                                 # h0 ping h3: the name became h3's address
    verdicts = [line for line in out.splitlines() if line.startswith("pingall:")]
    assert verdicts == ["pingall: 12/12 reachable", "pingall: 4/12 reachable", "pingall: 12/12 reachable"]
    assert "lost h0->h2" in out                                # cut between the leaves: cross-leaf pairs lost
    assert "l0<->s0" in out and "unknown command 'no-such-verb'" in res.stderr
    assert "Traceback" not in res.stderr
    assert (tmp_path / "out" / "replica.json").exists()
    ovs_log = (tmp_path / "out" / "ovs-vswitchd.log").read_text()   # this run's lines of the machine's log
    assert "bridge l0: added interface l0-eth1" in ovs_log and ovs_log.count("\n") < 5000
    assert json.loads(_testbed("ls", "--json").stdout)["replica"] is None


def test_exec_ls_down_from_other_processes(spec, tmp_path):
    proc, doc, record = _start_waiting(spec, tmp_path / "out")
    try:
        assert set(doc["nodes"]) == {"h0", "h1", "h2", "h3", "l0", "l1", "s0"}
        res = _testbed("exec", "h0", "--", "ping", "-c1", "-W5", "h3")
        assert res.returncode == 0 and "1 received" in res.stdout, res.stderr
        assert _testbed("exec", "h0", "--", "sh", "-c", "exit 3").returncode == 3
        res = _testbed("exec", "h0", "--", "ip", "-o", "addr", "show", "h0-eth1")
        assert doc["nodes"]["h0"]["ip"] in res.stdout        # really inside h0's namespace
        bad = _testbed("exec", "h9", "--", "true")
        assert bad.returncode == 2 and "no such node" in bad.stderr and "Traceback" not in bad.stderr
        ls = _testbed("ls")
        assert "up-test" in ls.stdout and ls.stderr == ""      # data on stdout
    finally:
        _down_leaves_nothing(proc, doc, record)
    assert _testbed("down").returncode == 2                     # nothing up any more: one line, exit 2


def _down_leaves_nothing(proc, doc, record) -> None:
    """`testbed down` from another process ends `testbed up`, and nothing it recorded is left."""
    try:
        down = _testbed("down", timeout=600)
        assert down.returncode == 0, down.stderr
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=300)
    assert not _objects_left(record)
    assert not Path(f"/run/scaleout-testbed/runs/{doc['run_id']}.json").exists()
    assert json.loads(_testbed("ls", "--json").stdout)["replica"] is None


def test_sighup_tears_the_replica_down(spec, tmp_path):
    proc, doc, record = _start_waiting(spec, tmp_path / "out")
    kinds = {o["kind"] for o in record["objects"]}
    assert {"process", "bridge", "link"} <= kinds and _objects_left(record)  # up before the signal
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGHUP, err[-2000:]
    assert "interrupted by SIGHUP" in err and "Traceback" not in err
    assert not _objects_left(record)
    assert not Path(f"/run/scaleout-testbed/runs/{doc['run_id']}.json").exists()
    assert json.loads(_testbed("ls", "--json").stdout)["replica"] is None


# Two spines: the switch graph has loops, so OVS needs the controller (or the switches run fabric.p4).
LOOPED_SPEC = SPEC.replace("up-test", "up-looped").replace("spines: 1", "spines: 2")


@pytest.mark.parametrize("flags, switch_process", [(["--controller"], None), (["--p4", "fabric"], "simple_switch")],
                         ids=["controller", "p4"])
def test_up_with_controller_or_p4_pings_across_and_down_leaves_nothing(tmp_path, flags, switch_process):
    spec = tmp_path / "up-looped.yaml"
    spec.write_text(LOOPED_SPEC)
    proc, doc, record = _start_waiting(spec, tmp_path / "out", *flags)
    try:
        argv0 = [" ".join(o.get("argv") or []) for o in record["objects"] if o["kind"] == "process"]
        if switch_process:
            assert sum(switch_process in a for a in argv0) == 4, argv0      # one BMv2 per switch
        else:
            assert sum("controllers.fabric" in a for a in argv0) == 1, argv0   # the os-ken fabric controller
        for src, dst in (("h0", "h3"), ("h3", "h1"), ("h2", "h0")):    # across leaves, over either spine
            res = _testbed("exec", src, "--", "ping", "-c2", "-W5", dst)
            assert res.returncode == 0 and " 0% packet loss" in res.stdout, (src, dst, res.stdout, res.stderr)
    finally:
        _down_leaves_nothing(proc, doc, record)
