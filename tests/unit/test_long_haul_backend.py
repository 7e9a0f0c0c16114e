"""long_haul_cnp's long haul follows the plan's backend choice (issue 14, item 2): tc netem where the
capabilities have it, the userspace link node where they do not or when asked, and the plan says why."""

from __future__ import annotations

import pytest

import scenarios.long_haul_cnp as scen
from testbed.errors import SpecError
from testbed.plan.capabilities import Capabilities
from testbed.validate import longhaul_setup as lh

KERNEL = Capabilities(netem=True, red=True, ovs_kernel=True, source="doctor")
BARE = Capabilities(source="doctor")


@pytest.fixture(scope="module")
def G():
    from testbed.topo.spec import build_graph, load_spec

    return build_graph(load_spec(scen.SPEC))


@pytest.mark.parametrize("case", lh.CASES)
def test_netem_where_the_kernel_has_it(G, case):
    r = lh.roles(G)
    plan = lh.case_plan(G, case, "ecn", KERNEL)
    backend, why = lh.long_haul_backend(plan, r)
    assert backend == "netem" and "kernel has netem" in why
    entry = next(e for e in plan.links if {e.u, e.v} == set(r.dci))
    # each direction's one-way delay (30 km: 150 us real, x scale emulated) in netem on its sending DCI's
    # egress; no tbf/RED there: BMv2 drains at the rate and marks with fabric.p4 (the plan once shaped only
    # non-BMv2 ends, so a netem long haul between two BMv2 switches got no tc at all)
    assert sorted(node for node, _ in entry.tc) == sorted(r.dci)
    for _node, cmds in entry.tc:
        argv = [" ".join(a) for a in cmds]
        assert len(argv) == 1 and f" netem delay {150 * G.graph['scale']:.0f}us" in argv[0], argv
    assert plan.to_json()["links"]   # plan.json carries every link's backend and reason


def test_userspace_without_netem_or_when_asked(G):
    r = lh.roles(G)
    backend, why = lh.long_haul_backend(lh.case_plan(G, "sender-dci", "ecn", BARE), r)
    assert backend == "userspace" and "lacks sch_netem" in why
    backend, why = lh.long_haul_backend(lh.case_plan(G, "sender-dci", "ecn", KERNEL, "userspace"), r)
    assert backend == "userspace" and "asked for" in why


def test_netem_asked_for_on_a_kernel_without_it_is_refused_naming_the_field(G):
    with pytest.raises(SpecError, match="link_backend"):
        lh.case_plan(G, "sender-dci", "ecn", BARE, "netem")


def test_run_config_names_the_long_hauls_backend(G):
    args = type("A", (), {"size": 1 << 20, "iters": 2, "window": 64, "repetitions": 1, "learn_qp": False,
                          "link_backend": "auto"})()
    config = lh.run_config(G, scen.SPEC, args, [30.0], ["ecn"], ["sender-dci"], "netem")
    assert config["backends"] == ["bmv2", "netem", "soft-rdma"] and config["link_backend"] == "auto"


def test_scenario_offers_the_choice():
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit) as exc:
        scen.main(["--link-backend", "tachyon"])
    assert exc.value.code == 2 and "--link-backend" in err.getvalue()
