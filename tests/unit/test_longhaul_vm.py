"""The long haul's side-by-side in the VM (testbed.bench.longhaul_vm, testbed.bench.link_vm), the link
node's lateness bound at a larger dilation, and TrialWatch's wait for frames in flight: pure parts."""

from __future__ import annotations

import json

import pytest

from testbed.bench import longhaul_vm as V
from testbed.links.delayline import DEFAULT_LATE_TOLERANCE_S
from testbed.links.node import DelayLineNode, late_tolerance_at, node_class


def test_argv_runs_the_guest_configuration_on_each_backend():
    from scenarios.long_haul_cnp import main

    for backend, flag in V.LINK_BACKEND_FLAG.items():
        argv = V.argv(backend, "/x")
        assert argv[:3] == ["testbed", "run", "long_haul_cnp"]
        assert argv[argv.index("--link-backend") + 1] == flag and argv[argv.index("--scale") + 1] == str(V.SCALE)
    # every option exists in the scenario: bad input there is exit 2 (SystemExit), here it must parse
    with pytest.raises(SystemExit) as e:
        main(V.argv("netem", "/x")[3:] + ["--scale", "0"])
    assert e.value.code == 2


def _row(mode, valid=True, **kw):
    return {"case": "sender-dci", "distance_km": 30.0, "mode": mode, "valid": valid,
            "validity": {"valid": valid, "reasons": [] if valid else ["machine CPU 97%"]},
            "accounting": {"lost": 0, "sent": 1000, "unaccounted": 0, "places": {}},
            "feedback_delay_ms": 0.31 if mode == "ecn" else 0.002, "fct_p50_ms": 1.5, "fct_p99_ms": 2.0,
            "throughput_mbps": 2400.0, "queue_peak_pkts": 150, "queue_mean_pkts": 40.0, "marks": 20 if mode == "ecn" else 0,
            "switch_cnps": 0 if mode == "ecn" else 9, "cnps_at_senders": 9, **kw}


def test_load_joins_rows_and_trials(tmp_path):
    rows = [_row("ecn"), _row("fast-cnp")]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    for m in V.MODES:
        d = tmp_path / "30km" / f"sender-dci-{m}"
        d.mkdir(parents=True)
        d.joinpath("trial.json").write_text(json.dumps({"settled_s": 3.2, "ring_frames_min": 10486, "elapsed_s": 40,
                                                        "emulator": {"late_fraction": 0.004},
                                                        "cpu": {"machine_mean": 61.0}}))
    got = V.load(tmp_path)
    assert set(got) == set(V.MODES) and got["ecn"]["settled_s"] == 3.2 and got["fast-cnp"]["late_fraction"] == 0.004


def test_markdown_one_column_per_backend_and_mode_and_says_invalid():
    ok = {m: {**_row(m), "cpu": {"machine_mean": 60}, "late_fraction": None} for m in V.MODES}
    bad = {m: {**_row(m, valid=False), "cpu": {"machine_mean": 97}, "late_fraction": 0.02} for m in V.MODES}
    text = V.markdown({"netem": ok, "userspace": bad}, ["# t"])
    lines = text.splitlines()
    assert lines[0] == "# t" and lines[2].count("|") == 2 * len(V.BACKENDS) + 2
    assert "| trial | valid | INVALID: machine CPU 97% | valid | INVALID: machine CPU 97% |" in text
    assert "2.0%" in text and "0.31" in text and "| 2400 |" in text
    assert "not run" in V.markdown({"netem": ok})


def test_link_fidelity_keeps_the_section_not_measured(tmp_path, monkeypatch):
    from testbed.bench import link_vm

    target = tmp_path / "link-fidelity.md"
    monkeypatch.setattr(link_vm, "TARGET", target)
    target.write_text("# link table\nrow\n")
    assert link_vm._compose(None, None) == "# link table\nrow\n"
    both = link_vm._compose(None, link_vm.LONG_HAUL_HEADING + "\nhaul 1\n")
    assert both.startswith("# link table\nrow\n\n" + link_vm.LONG_HAUL_HEADING)
    target.write_text(both)
    assert link_vm._compose("# new link\n", None) == "# new link\n\n" + link_vm.LONG_HAUL_HEADING + "\nhaul 1\n"
    assert link_vm._compose(None, link_vm.LONG_HAUL_HEADING + "\nhaul 2\n").endswith("haul 2\n")


def test_late_tolerance_keeps_its_real_world_bound_at_larger_scales():
    assert late_tolerance_at(1000) == DEFAULT_LATE_TOLERANCE_S == late_tolerance_at(50)
    assert late_tolerance_at(20000) == pytest.approx(20 * DEFAULT_LATE_TOLERANCE_S)
    assert node_class() is DelayLineNode
    cls = node_class(5e-3)
    assert issubclass(cls, DelayLineNode) and cls is not DelayLineNode


def test_trial_watch_waits_until_no_counter_moves(monkeypatch):
    from testbed.links.hops import Element
    from testbed.validate import trial_watch as W

    monkeypatch.setattr(W.ifcounters, "topology", lambda rep: ([Element("x0", "switch", ("root/a",))], []))
    # root/eth0 (another interface of the root namespace) keeps moving: it must not keep the trial waiting
    readings = iter([{"root/a": n, "root/eth0": n} for n in (1, 2, 3)] + [{"root/a": 3, "root/eth0": n} for n in range(1000)])
    monkeypatch.setattr(W.ifcounters, "snapshot", lambda rep: next(readings))
    watch = W.TrialWatch.__new__(W.TrialWatch)
    watch.rep = None
    assert watch._settle(0.05) is not None
    assert next(readings)["root/a"] == 3   # it kept reading until the run's counters stood still
    moving = iter(range(10**6))
    monkeypatch.setattr(W.ifcounters, "snapshot", lambda rep: {"root/a": next(moving)})
    from testbed import poll as P

    monkeypatch.setattr(P, "poll", lambda fn, timeout, **kw: (_ for _ in ()).throw(TimeoutError("moving")))
    assert watch._settle(0.05) is None


def test_netem_lag_is_the_netem_delay_of_the_capturing_end_only():
    from types import SimpleNamespace as NS

    from testbed.validate.longhaul_setup import netem_lag_s

    netem = (("tc", "qdisc", "replace", "dev", "d0-eth2", "root", "handle", "10:", "netem", "delay", "3000000us"),)
    haul = NS(u="d0", v="d1", applied=NS(delay_s=3.0), tc=(("d0", netem), ("d1", netem)))
    host = NS(u="x0", v="d0", applied=NS(delay_s=0.01), tc=(("x0", (("tc", "qdisc", "add", "htb"),)),))
    plan = NS(links=[haul, host])
    assert netem_lag_s(plan, "d0", "d1") == 3.0 == netem_lag_s(plan, "d1", "d0")
    assert netem_lag_s(plan, "d0", "x0") == 0.0   # no netem on d0's end of that link
    # store and forward: netem's rate holds the frame for its serialisation too (1000 B at 8 kbit/s: 1 s)
    serial = (netem[0] + ("rate", "8000bit", "limit", "1000"),)
    plan = NS(links=[NS(u="d0", v="d1", applied=NS(delay_s=3.0), tc=(("d0", serial), ("d1", serial)))])
    assert netem_lag_s(plan, "d0", "d1", 1000) == pytest.approx(4.0) and netem_lag_s(plan, "d0", "d1") == 3.0


def test_a_netem_trial_follows_its_health_block_and_shows_the_timers(tmp_path):
    timers = {"policy": "SCHED_FIFO 20", "stalled_fraction": 0.021, "stalled_fraction_beyond": {"5ms": 0.012},
              "stalls": 96, "stall_ms": 10.0, "tolerance_us": 250.0, "lateness_us": {"p50": 40, "p99": 30_000, "max": 212_000}}
    rows = [_row("ecn", long_haul_backend="netem"), _row("fast-cnp", long_haul_backend="netem")]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    for m, t in zip(V.MODES, (timers, {**timers, "stalled_fraction": 0.004}), strict=True):
        d = tmp_path / "30km" / f"sender-dci-{m}"
        d.mkdir(parents=True)
        d.joinpath("trial.json").write_text(json.dumps({
            "emulator": {"late_fraction": 0.0, "lateness_us": {}, "unaccounted": 0, "lost_inside_emulator": 0},
            "health": {"healthy": True, "reasons": []}, "cpu": {"machine_mean": 60.0, "timers": t}}))
    got = V.load(tmp_path)
    assert got["ecn"]["valid"] is False and got["fast-cnp"]["valid"] is True   # rows.json said both valid
    assert got["ecn"]["validity"]["reasons"] == ["emulator unhealthy: timers stalled 2.1% of the run (> 1%): "
                                                 "tc/OVS/BMv2 timing is the machine's"]
    text = V.markdown({"netem": got})
    assert "| trial | INVALID: emulator unhealthy: timers stalled 2.1%" in text
    assert "2.1% beyond 0.25 ms (1.2% beyond 5 ms); 96 wake-ups > 10 ms, longest 212 ms (SCHED_FIFO 20)" in text
    assert "netem's lateness is not measured" not in text and "judged by the machine's timers" in text
