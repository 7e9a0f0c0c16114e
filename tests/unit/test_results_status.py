"""Results folders say what they are: status.json last, nothing made before a refusal, `testbed results`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import cli
from testbed.emu.signals import Terminated
from testbed.errors import EmulationError, NotRootError, SpecError, UsageError
from testbed.scenario import Results, available

REPO = Path(__file__).resolve().parents[2]


def _args(out):
    return argparse.Namespace(out=str(out), quick=True, json=False)


def _status(folder: Path) -> dict:
    return json.loads((folder / "status.json").read_text())


def test_ok_run_writes_config_metrics_summary_then_status(tmp_path):
    out = tmp_path / "run"
    with Results("demo", _args(out), {"k": 4}) as res:
        assert not out.exists()  # nothing before the run needs it
        res.write_json("rows.json", [1, 2])
        assert _status(out)["status"] == "running" and _status(out)["pid"] == os.getpid()
        res.finish({"pairs": 3})
    names = sorted(p.name for p in out.iterdir())
    assert names == ["config.json", "metrics.json", "plan.json", "rows.json", "status.json", "summary.json"]
    assert _status(out)["status"] == "ok" and _status(out)["ended"]
    # status.json is written last: no file is newer.
    assert max(p.stat().st_mtime_ns for p in out.iterdir()) == (out / "status.json").stat().st_mtime_ns
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["summary"] == {"pairs": 3} and metrics["files"] == ["rows.json"]
    assert json.loads((out / "config.json").read_text())["config"] == {"k": 4}


def test_plan_json_indexes_the_replicas_plans_or_says_there_is_none(tmp_path):
    nested = tmp_path / "nested"
    with Results("dci_protection", _args(nested)) as res:
        for mode in ("ocs", "ip"):  # what Replica(out_dir=res.dir / mode) writes
            (res.dir / mode).mkdir()
            (res.dir / mode / "plan.json").write_text("{}")
        res.finish({})
    doc = json.loads((nested / "plan.json").read_text())
    assert doc["plans"] == ["ip/plan.json", "ocs/plan.json"]
    none = tmp_path / "none"
    with pytest.raises(EmulationError), Results("pfc_incast", _args(none)) as res:
        res.write_json("rows.json", [])
        raise EmulationError("boom")  # a failed run says what it built too
    assert json.loads((none / "plan.json").read_text())["plans"] == []
    assert "no replica plan" in json.loads((none / "plan.json").read_text())["note"]


def test_a_replicas_own_plan_json_is_kept(tmp_path):
    out = tmp_path / "run"
    with Results("demo", _args(out)) as res:
        (res.dir / "plan.json").write_text('{"switches": []}')
        res.finish({})
    assert json.loads((out / "plan.json").read_text()) == {"switches": []}


def test_metrics_written_by_the_scenario_is_kept(tmp_path):
    out = tmp_path / "run"
    with Results("demo", _args(out)) as res:
        res.write_json("metrics.json", {"mine": 1})
        res.finish({})
    assert json.loads((out / "metrics.json").read_text()) == {"mine": 1}


@pytest.mark.parametrize("exc", [NotRootError("testbed run demo"), SpecError("--size", "must be >= 1")])
def test_refused_before_anything_leaves_nothing(tmp_path, exc):
    out = tmp_path / "run"
    with pytest.raises(type(exc)), Results("demo", _args(out)):
        raise exc
    assert not out.exists()


@pytest.mark.parametrize("exc, status, words", [
    (EmulationError("switch s3 did not start"), "failed", "switch s3 did not start"),
    (ZeroDivisionError("x"), "failed", "internal error: ZeroDivisionError"),
    (KeyboardInterrupt(), "interrupted", "SIGINT"),
    (Terminated(1), "interrupted", "SIGHUP"),
    (Terminated(15), "interrupted", "SIGTERM"),
    (SpecError("links", "bad"), "refused", "links: bad"),
])
def test_status_after_work_started(tmp_path, exc, status, words):
    out = tmp_path / "run"
    with pytest.raises(type(exc)), Results("demo", _args(out)) as res:
        res.write_json("rows.json", [])
        raise exc
    doc = _status(out)
    assert doc["status"] == status and words in doc["reason"]
    assert not (out / "metrics.json").exists()  # a failed run does not pretend to have metrics


def test_a_run_that_ends_without_summary_is_failed(tmp_path):
    out = tmp_path / "run"
    with Results("demo", _args(out)) as res:
        res.write_json("rows.json", [])
    assert _status(out)["status"] == "failed"


def test_unwritable_out_is_refused_up_front(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError) as err, Results("demo", _args(blocker / "x")):
        pass
    assert err.value.exit_code == 2 and "--out" in str(err.value)


def test_results_lists_each_status_and_failed_filters(tmp_path, capsys):
    root = tmp_path / "results"
    with Results("demo", _args(root / "demo" / "1")) as res:
        res.finish({})
    with pytest.raises(EmulationError), Results("demo", _args(root / "demo" / "2")) as res:
        res.write_json("rows.json", [])
        raise EmulationError("boom")
    legacy = root / "long_haul_cnp" / "3"
    legacy.mkdir(parents=True)
    (legacy / "config.json").write_text("{}")
    killed = root / "demo" / "4"
    killed.mkdir(parents=True)
    (killed / "status.json").write_text(json.dumps({"status": "running", "pid": 2 ** 22 + 7, "pid_start": 1.0,
                                                    "scenario": "demo", "started": "2026"}))
    assert cli.main(["results", str(root), "--json"]) == 0
    rows = {Path(r["path"]).name: r["status"] for r in json.loads(capsys.readouterr().out)["runs"]}
    assert rows == {"1": "ok", "2": "failed", "3": "unknown", "4": "killed"}
    assert cli.main(["results", str(root), "--failed", "--json"]) == 0
    rows = {Path(r["path"]).name for r in json.loads(capsys.readouterr().out)["runs"]}
    assert rows == {"2", "3", "4"}
    assert cli.main(["results", str(root)]) == 0
    captured = capsys.readouterr()
    assert "killed" in captured.out and captured.err == ""  # a table of data: stdout


@pytest.mark.parametrize("scenario", available())
def test_scenarios_as_non_root_refuse_and_leave_no_folder(tmp_path, scenario):
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.fail("setpriv (util-linux) is needed to drop root; `make setup` installs it")
    work = tmp_path / "cwd"
    work.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(work, 0o777)
    argv = [sys.executable, "-m", "testbed.cli", "run", scenario, "--quick"]
    if os.geteuid() == 0:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=+dac_read_search",
                "--ambient-caps=+dac_read_search", *argv]
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME="/tmp", TESTBED_STATE_DIR="/run/scaleout-testbed")
    res = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "needs root" in res.stderr and "Traceback" not in res.stderr
    assert list(work.iterdir()) == []
