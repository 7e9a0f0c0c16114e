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


def _bench(*args):
    env = dict(os.environ, TESTBED_LOCK_WAIT=os.environ.get("TESTBED_LOCK_WAIT", "900"))
    return subprocess.run([sys.executable, "-m", "testbed.cli", "bench", "build", "fat-tree-k4", "big-switch",
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
