"""``testbed validate``'s seeds: one run seed, a different delay-line seed per experiment and per run, recorded.

With the former fixed seed (7 for every DCQCN experiment), every repetition replayed one RED draw: its first
mark and first rate cut fell at the same time in every run. These tests fail for any fixed per-experiment seed.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest

from testbed.commands import validate as V
from testbed.seeds import SEED_LIMIT, derive, draw
from testbed.validate import replica
from testbed.validate.rows import onset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_validate_cli import _testbed  # noqa: E402


def _all(seeds: dict) -> list[int]:
    return seeds["dcqcn"] + seeds["goodput"] + seeds["gaps"] + [seeds["red"]]


def test_every_experiment_of_a_run_gets_its_own_link_seed():
    seeds = V.link_seeds(12345, V.plan(quick=False))
    assert (len(seeds["dcqcn"]), len(seeds["goodput"]), len(seeds["gaps"])) == (2, 2, 4)
    assert len(set(_all(seeds))) == 9
    assert all(0 <= s < SEED_LIMIT for s in _all(seeds))


def test_the_same_run_seed_repeats_the_link_seeds_and_another_changes_them():
    p = V.plan(quick=True)
    assert V.link_seeds(7, p) == V.link_seeds(7, p)
    runs = [V.link_seeds(s, p)["dcqcn"][0] for s in (1, 2, 3, 4)]
    assert len(set(runs)) == 4          # repetitions with different run seeds draw different RED marks
    # the quick plan's first experiment keeps its seed in the full plan (labels, not positions in a list)
    assert V.link_seeds(9, V.plan(quick=False))["dcqcn"][0] == V.link_seeds(9, p)["dcqcn"][0]


def test_derive_is_the_replica_plans_link_rule_and_draw_is_in_range():
    import zlib

    assert derive(5, "s1|s2") == (5 ^ zlib.crc32(b"s1|s2")) & 0x7FFFFFFF   # the plan's link seeds, unchanged
    assert derive(5, "a") != derive(5, "b") and derive(5, "a") != derive(6, "a")
    assert len({draw() for _ in range(8)}) > 1 and all(0 <= draw() < SEED_LIMIT for _ in range(8))


class _Wire:
    def stop(self):
        return {}


def _measure(monkeypatch, tmp_path, seed: int, quick: bool = False) -> tuple[dict, list]:
    """``_measure`` with the replica's runs replaced by recorders (no root): the seeds each run was given."""
    calls = []

    def dcqcn(wire, d, r, core=None, *, seed):
        calls.append(("dcqcn", seed))
        return {"senders": [], "link_stats": {}, "link_seed": seed}

    def goodput(wire, work, rate, one_way, window, seconds, core=None, *, seed):
        calls.append(("goodput", seed))
        return {"link_stats": {}, "link_seed": seed}

    monkeypatch.setattr(replica, "open_validation_wire", lambda reg, work: _Wire())
    monkeypatch.setattr(replica, "run_dcqcn", dcqcn)
    monkeypatch.setattr(replica, "run_goodput", goodput)
    monkeypatch.setattr("testbed.emu.registry.RunRegistry", lambda name: contextlib.nullcontext())
    monkeypatch.setattr("testbed.links.core.selected_core", lambda: ("python", "test"))
    monkeypatch.setattr(V, "_health", lambda raw, p: {})
    p = V.plan(quick)
    raw, _ = V._measure(["dcqcn", "goodput"], p, tmp_path, quick, V.link_seeds(seed, p))
    return raw, calls


def test_each_run_is_started_with_its_own_seed_and_records_it(monkeypatch, tmp_path):
    raw, calls = _measure(monkeypatch, tmp_path, seed=42)
    given = [s for _, s in calls]
    assert len(set(given)) == len(given) == 4
    assert [d["link_seed"] for d in raw["dcqcn"]] == [s for k, s in calls if k == "dcqcn"]
    assert [g["link_seed"] for g in raw["goodput"]] == [s for k, s in calls if k == "goodput"]
    again, calls_again = _measure(monkeypatch, tmp_path, seed=42)
    assert calls_again == calls
    _, other = _measure(monkeypatch, tmp_path, seed=43)
    assert [s for _, s in other][0] != given[0]


def test_the_link_group_gives_the_red_case_the_runs_own_seed(monkeypatch, tmp_path):
    given = []

    def link(wire, quick, rates, core, *, gap_seeds, red_seed):
        given.append((tuple(gap_seeds), red_seed))
        return {"delay_cases": [], "gap_captures": [], "red": {"link_seed": red_seed}}

    monkeypatch.setattr(replica, "open_validation_wire", lambda reg, work: _Wire())
    monkeypatch.setattr(replica, "run_link", link)
    monkeypatch.setattr("testbed.emu.registry.RunRegistry", lambda name: contextlib.nullcontext())
    monkeypatch.setattr("testbed.links.core.selected_core", lambda: ("python", "test"))
    monkeypatch.setattr(V, "_health", lambda raw, p: {})
    p = V.plan(True)
    for seed in (1, 2):
        raw, _ = V._measure(["red"], p, tmp_path, True, V.link_seeds(seed, p))
        assert raw["link"]["red"]["link_seed"] == given[-1][1]
    assert given[0][1] != given[1][1] and given[0][1] not in given[0][0]   # its own draw, per run


def _sender(start_s: float, cnp_at: float | None, cut_at: float | None, end: float = 2.0) -> dict:
    rows = []
    for k in range(int(end / 0.05) + 1):
        t = k * 0.05
        rate = 40e6 if cut_at is not None and t >= cut_at else 50e6
        cnps = 1.0 if cnp_at is not None and t >= cnp_at else 0.0
        rows.append([t, rate, t * 1e6, cnps])
    return {"series": {"columns": ["t", "rate_bps", "acked_bytes", "cnps_rx"], "rows": rows},
            "started_at": start_s, "wall_minus_monotonic": 0.0, "retransmissions": 0}


def test_onset_gives_the_first_cnp_at_any_sender_and_flow_ones_first_cut_in_real_ms():
    run = replica.DcqcnRun(line_rate_bps=1e9, scale=20.0)     # 50 Mb/s emulated line rate
    raw = {"senders": [_sender(0.0, 1.2, 1.25), _sender(1.0, 0.1, None)], "queue_series": []}
    assert onset(raw, run) == {"first_cnp_real_ms": pytest.approx(55.0), "first_cut_real_ms": pytest.approx(62.5)}
    calm = {"senders": [_sender(0.0, None, None)], "queue_series": []}
    assert onset(calm, run) == {"first_cnp_real_ms": None, "first_cut_real_ms": None}


def test_experiments_and_health_record_each_link_seed_beside_the_trial():
    p = V.plan(quick=True)
    raw = {"dcqcn": [{"senders": [_sender(0.0, 1.2, 1.25)], "queue_series": [], "link_seed": 99,
                      "link_stats": {}}], "goodput": []}
    (exp,) = V._experiments(p, raw)
    assert exp["link_seed"] == 99 and exp["first_cut_real_ms"] == pytest.approx(62.5)
    assert V._health(raw, p)["runs"][0]["link_seed"] == 99


def test_bad_seed_is_one_line_exit_2(tmp_path):
    res = _testbed("--rows", "long-haul", "--seed", "-3", "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "--seed" in res.stderr and "0..2147483647" in res.stderr and not (tmp_path / "out").exists()


def test_the_run_seed_is_recorded_given_or_drawn(tmp_path):
    out = []
    for i, extra in enumerate((["--seed", "31337"], [], [])):
        res = _testbed("--rows", "long-haul", "--json", "--out", str(tmp_path / f"o{i}"), *extra)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        config = json.loads((tmp_path / f"o{i}" / "config.json").read_text())
        assert config["config"]["seed"] == doc["seed"]
        out.append(doc["seed"])
    assert out[0] == 31337
    assert out[1] != out[2]       # drawn per run (the chance of a tie is 2^-31)
