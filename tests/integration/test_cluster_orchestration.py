"""The coordinator over real SSH (paramiko client against paramiko's server side on 127.0.0.1, no root),
with the real worker program in ``--dry-run`` (it plans, describes its tunnels and uses the forwarded
controller port, but builds nothing): remote forwards on loopback, mirror-image tunnels, the start
barrier, commands routed to the worker holding a node, results pulled, and every teardown path
(normal, Ctrl-C, a killed worker, a lost coordinator). Each test starts four Python processes (two
probes, two workers): a few seconds each."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time

import pytest

from testbed.cluster.coordinator import Cluster, WorkerLost
from testbed.cluster.ssh import SshOptions
from testbed.plan import Overrides
from testbed.poll import poll
from testbed.topo.spec import resolve_spec
from tests.unit.sshd_stub import REPO, USER, Listener, SshdStub, known_hosts, new_client_key, worker


@pytest.fixture(scope="module")
def client_key(tmp_path_factory):
    return new_client_key(tmp_path_factory.mktemp("keys"))


# -- the whole orchestration, dry ------------------------------------------------------------------------------
@pytest.fixture
def pair(tmp_path, client_key):
    with SshdStub(USER, client_key[0]) as a, SshdStub(USER, client_key[0]) as b:
        lst = Listener()
        opts = SshOptions(known_hosts=str(known_hosts(tmp_path, a, b)), identity=str(client_key[1]))
        cl = Cluster(resolve_spec("fat-tree-k4"), [worker(a, "10.99.0.1"), worker(b, "10.99.0.2")],
                     tmp_path / "out", ssh=opts, dry_run=True, controller=("127.0.0.1", lst.port),
                     ready_timeout=120, overrides=Overrides(links="rates"))
        yield cl, a, b, lst


def _tmp_dirs(cl):
    return [w.tmp for w in cl.workers]


def test_dry_run_cluster_forwards_routes_and_tears_down(pair, tmp_path):
    cl, a, b, lst = pair
    with cl:
        # both workers reached the "controller" through their remote forward on their own loopback
        poll(lambda: sorted(lst.lines) == ["dry-run worker 0", "dry-run worker 1"], timeout=10, interval=0.05,
             what="both workers' lines at the controller")
        assert a.refused_forwards == [] and b.refused_forwards == []
        # each worker's tunnels are the mirror image of the other's: same VNIs, local/remote swapped
        vx = {w.index: [c for c in w.ready["commands"] if c[:2] == ["ip", "link"] and "vxlan" in c]
              for w in cl.workers}
        assert len(vx[0]) == len(vx[1]) == len(cl.partition.cut) == 8
        for cmds, local, remote in ((vx[0], "10.99.0.1", "10.99.0.2"), (vx[1], "10.99.0.2", "10.99.0.1")):
            for c in cmds:
                assert c[c.index("local") + 1] == local and c[c.index("remote") + 1] == remote
        assert sorted(c[c.index("id") + 1] for c in vx[0]) == sorted(c[c.index("id") + 1] for c in vx[1])
        # a command runs on the worker that holds the node
        h0, h15 = cl.worker_of("h0").index, cl.worker_of("h15").index
        assert h0 != h15
        (rc0, out0), (rc1, out1) = cl.exec_many([("h0", ["true"]), ("h15", ["true"])])
        assert rc0 == rc1 == 0 and out0 == "dry-run: h0: true" and out1 == "dry-run: h15: true"
        tmps = _tmp_dirs(cl)
        assert all(os.path.isdir(t) for t in tmps)
    procs = a.worker_procs() + b.worker_procs()
    assert [p.wait(10) for p in procs] == [0, 0]
    for w in cl.workers:
        log = (w.out_dir / "worker.log").read_text()
        assert "tearing down (the coordinator asked)" in log
        assert (w.out_dir / "spec.yaml").is_file()          # the worker's results folder was pulled
    assert not any(os.path.exists(t) for t in tmps)          # and its temporary folder removed
    assert json.loads((tmp_path / "out" / "cluster.json").read_text())["partition"]["workers"] == 2


def test_ctrl_c_tears_every_worker_down(pair):
    cl, a, b, _ = pair
    with pytest.raises(KeyboardInterrupt):
        with cl:
            tmps = _tmp_dirs(cl)
            raise KeyboardInterrupt
    assert [p.wait(10) for p in a.worker_procs() + b.worker_procs()] == [0, 0]
    for w in cl.workers:
        assert "tearing down (the coordinator asked)" in (w.out_dir / "worker.log").read_text()
    assert not any(os.path.exists(t) for t in tmps)


def test_a_killed_worker_tears_the_other_down(pair):
    cl, a, b, _ = pair
    with pytest.raises(WorkerLost) as err:
        with cl:
            tmps = _tmp_dirs(cl)
            victim = b.worker_procs()[0]
            os.killpg(victim.pid, signal.SIGKILL)
            t0 = time.monotonic()
            cl.hold(interval=0.1)
    assert "w1" in str(err.value) and "lost" in str(err.value)
    assert time.monotonic() - t0 < 15
    survivor = a.worker_procs()[0]
    assert survivor.wait(10) == 0
    assert "tearing down (the coordinator asked)" in (cl.workers[0].out_dir / "worker.log").read_text()
    assert not any(os.path.exists(t) for t in tmps)


def test_a_lost_coordinator_makes_the_worker_tear_down(pair):
    cl, a, b, _ = pair
    cl.__enter__()
    tmps = _tmp_dirs(cl)
    try:
        for w in cl.workers:
            w.conn.client.close()            # the coordinator's SSH sessions vanish without `stop`
        procs = a.worker_procs() + b.worker_procs()
        assert [p.wait(15) for p in procs] == [0, 0]
        for _, p in a.procs + b.procs:
            assert p.poll() is not None
        # Nobody is left to pull the results: the worker keeps them where they are (docs/cluster.md).
        assert all(os.path.isdir(os.path.join(t, "out")) for t in tmps)
    finally:
        cl.workers.clear()                    # nothing left to tear down from here
        for t in tmps:
            shutil.rmtree(t, ignore_errors=True)
    outs = [p.stderr for p in procs]
    assert all(o is not None for o in outs)


def test_worker_refuses_before_go_and_a_plan_digest_mismatch(tmp_path, client_key, pair):
    """The worker program alone: commands before `go` are refused; a different plan is refused."""
    import subprocess

    cl, *_ = pair
    with cl:
        job_doc = None
        for w in cl.workers:
            rc, out, _ = w.conn.run(f"cat {w.tmp}/job.json")
            job_doc = json.loads(out)
            break
    job = tmp_path / "job.json"
    job_doc["out_dir"] = str(tmp_path / "w")
    job.write_text(json.dumps(job_doc))
    proc = subprocess.run([sys.executable, "-m", "testbed.cluster.worker", "run", str(job), "--dry-run"],
                          input='{"cmd":"exec","id":1,"node":"h0","argv":["true"]}\n{"cmd":"stop"}\n',
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    result = next(e for e in events if e["event"] == "result")
    assert result["rc"] == 125 and "start barrier" in result["output"]
    assert events[-1]["event"] == "stopped" and proc.returncode == 0
    job_doc["plan_digest"] = "0" * 16
    job.write_text(json.dumps(job_doc))
    proc = subprocess.run([sys.executable, "-m", "testbed.cluster.worker", "run", str(job), "--dry-run"],
                          input="", capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2
    err = json.loads(proc.stdout.splitlines()[-1])
    assert err["event"] == "error" and "job.plan_digest" in err["message"]


def test_cli_dry_run_over_ssh(tmp_path, client_key):
    """`testbed cluster run --dry-run` end to end: no root, the coordinator's loopback sink as controller."""
    from testbed.cli import main

    with SshdStub(USER, client_key[0]) as a, SshdStub(USER, client_key[0]) as b:
        kh = known_hosts(tmp_path, a, b)
        out = tmp_path / "res"
        rc = main(["cluster", "run", "fat-tree-k4", "--dry-run", "--links", "rates",
                   "--workers", f"{USER}@127.0.0.1:{a.port},{USER}@127.0.0.1:{b.port}",
                   "--underlay", "10.99.0.1,10.99.0.2", "--known-hosts", str(kh), "--identity", str(client_key[1]),
                   "--out", str(out)])
        assert rc == 0
        doc = json.loads((out / "results.json").read_text())
        assert [w["controller_reached"] for w in doc["workers_ready"]] == [True, True]
        assert doc["partition"]["cut"] == 8 and doc["passed"] is True
        assert [p.wait(10) for p in a.worker_procs() + b.worker_procs()] == [0, 0]
