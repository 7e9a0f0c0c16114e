"""``testbed up --link-backend``: the choice reaches the plan, and netem asked for on a kernel without it
is refused before anything starts (no controller, no replica)."""

from __future__ import annotations

import pytest

from testbed.errors import SpecError


def _assume_no_netem(monkeypatch):
    import testbed.doctor as doctor
    from testbed.plan import ASSUMED

    assert not ASSUMED.netem
    monkeypatch.setattr(doctor, "plan_capabilities", lambda: ASSUMED)


def test_netem_without_netem_is_refused_before_the_controller_starts(monkeypatch, tmp_path):
    from testbed.commands.up import _replica, load_graph

    _assume_no_netem(monkeypatch)
    G = load_graph("long-haul", None, None)   # delay lines on its long-haul links, loops: a controller
    rep = _replica(G, None, tmp_path, True, "netem")   # run None: starting a controller would raise otherwise
    with pytest.raises(SpecError, match="link_backend.*netem was asked for"):
        rep.__enter__()
    assert rep.ctl is None


def test_unknown_backend_is_one_line_exit_2(run_cli):
    code, out, err = run_cli(["up", "spine-leaf", "--link-backend", "tc"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--link-backend" in err, err
