"""``testbed validate``: bad input is one line and exit 2; the long-haul rows run without root from a folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_validate_rows import _doc  # noqa: E402


def _testbed(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME="/tmp")
    return subprocess.run([sys.executable, "-m", "testbed.cli", "validate", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)


def test_unknown_row_group_is_one_line_exit_2(tmp_path):
    res = _testbed("--rows", "dcqcn,warp", "--out", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "testbed: --rows: unknown group 'warp'; allowed: dcqcn, link, red, goodput, long-haul"]
    assert not any(tmp_path.iterdir())


def test_missing_long_haul_folder_is_one_line_exit_2(tmp_path):
    res = _testbed("--rows", "long-haul", "--long-haul", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "--long-haul" in res.stderr and not (tmp_path / "out").exists()


def test_long_haul_rows_from_a_results_folder(tmp_path):
    doc = _doc()
    src = tmp_path / "long_haul"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"config": doc["config"]}))
    (src / "rows.json").write_text(json.dumps(doc["rows"]))
    res = _testbed("--rows", "long-haul", "--long-haul", str(src), "--json", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    # bound, saved, 2 excess, the gain against both models (the fluid one counted where in its scope)
    assert out["measured"] + out["out_of_scope"] == 6 and out["all_passed"] and out["missing"] == 0
    gain = [r for r in out["rows"] if "goodput ratio" in r["metric"]]
    assert {r["reference"] for r in gain} == {"DCQCN fluid model, feedback shortened",
                                              "DCQCN discrete simulation, feedback shortened"}
    assert all(r["passed"] or r["scope"] for r in gain)
    assert all(Path(r["plot"]).is_file() for r in out["rows"])
    assert any("gain-vs-distance" in r["plot"] for r in out["rows"])
    status = json.loads((tmp_path / "out" / "status.json").read_text())   # a completed run says so
    assert status["status"] == "ok", status
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["all_passed"]


def test_long_haul_only_run_prints_no_replica_health_or_seed(tmp_path):
    """A run that read stored trials made no draws and ran no emulator: it says so instead of printing a
    seed that decided nothing and "emulator healthy; load None"."""
    doc = _doc()
    src = tmp_path / "long_haul"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"config": doc["config"]}))
    (src / "rows.json").write_text(json.dumps(doc["rows"]))
    res = _testbed("--rows", "long-haul", "--long-haul", str(src), "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "no replica runs here" in text, res.stdout
    assert "load None" not in text and "emulator healthy" not in text
    assert not any(line.startswith("seed ") for line in res.stdout.splitlines()), res.stdout
