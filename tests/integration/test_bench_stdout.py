"""`testbed bench build` prints its figures on stdout like every data command (progress on stderr), with the
machine's load next to them, one table row per spec; `--json` leaves exactly one JSON document (a list, one
object per spec) on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.ovs]

REPO = Path(__file__).resolve().parents[2]


def _bench(*args, specs=("fat-tree-k4", "big-switch")):
    env = dict(os.environ, TESTBED_LOCK_WAIT=os.environ.get("TESTBED_LOCK_WAIT", "900"))
    return subprocess.run([sys.executable, "-m", "testbed.cli", "bench", "build", *specs,
                           "--no-plain", "--links", "none", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def test_bench_build_figures_on_stdout_with_the_load():
    res = _bench()
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [line.split() for line in res.stdout.splitlines()
            if line.startswith(("fat-tree-k4 ", "big-switch "))]
    assert [r[:3] for r in rows] == [["fat-tree-k4", "36", "48"], ["big-switch", "33", "32"]]
    assert all(r[4] == "-" and r[6] == "-" for r in rows)  # --no-plain: no plain column figures
    assert "teardown" in res.stdout and "load average" in res.stdout
    assert "before->after" not in res.stderr and "replica build 1/1" in res.stderr  # progress stays on stderr


def test_bench_build_json_is_the_only_stdout():
    res = _bench("--json")
    assert res.returncode == 0, res.stderr[-2000:]
    docs = json.loads(res.stdout)
    assert [d["spec"] for d in docs] == ["fat-tree-k4", "big-switch"] and docs[0]["nodes"] == 36
    for doc in docs:
        assert doc["replica"]["build_s"] > 0 and doc["replica"]["teardown_s"] > 0
        assert len(doc["load_before"].split(", ")) == 3 and doc["plain"] is None
        # Where the teardown went, step by step; the steps fit inside the measured teardown.
        stages = doc["runs"]["replica"][0]["teardown_stages_s"]
        assert {"bridges", "shells", "links", "registry processes"} <= set(stages)
        assert sum(stages.values()) <= doc["replica"]["teardown_s"] + 0.05


def test_bench_build_kill_then_clean_leaves_nothing():
    """`--kill`: the replica is built in a child that is SIGKILLed once up (none of its teardown runs); the
    figure is `testbed clean`, and afterwards nothing of the replica is on the machine."""
    from testbed.emu.registry import load_runs
    from testbed.plan.layout import interfaces, layout
    from testbed.topo.spec import build_graph, load_spec, resolve_spec

    res = _bench("--kill", "--json", specs=("fat-tree-k4",))
    assert res.returncode == 0, res.stderr[-2000:]
    (doc,) = json.loads(res.stdout)
    assert doc["teardown_by"] == "testbed clean after SIGKILL" and doc["plain"] is None
    run = doc["runs"]["replica"][0]
    assert run["left"] == 0 and run["teardown_s"] > 0 and run["build_s"] > 0
    assert "testbed clean after SIGKILL" in res.stderr
    lay = layout(build_graph(load_spec(resolve_spec("fat-tree-k4"))))
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True).stdout.split()
    assert not set(bridges) & {sw.name for sw in lay.switches}
    assert not [n for n in interfaces(lay) if os.path.exists(f"/sys/class/net/{n}")]
    assert not [d for d in load_runs() if d.get("name") == "bench-kill"]
    shells = subprocess.run(["pgrep", "-f", "^bash.*mininet:"], capture_output=True, text=True).stdout.split()
    assert not shells, "a host shell of the killed replica is still running"
