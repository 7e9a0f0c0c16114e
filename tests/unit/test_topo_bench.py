"""Pure parts of ``testbed bench build``: loop detection, ratios, medians; and the CLI wiring."""

import pytest

from testbed.bench.build import is_looped, median_run, ratios
from testbed.topo import generators as gen


@pytest.mark.parametrize("G,looped", [
    (gen.fat_tree(4), True), (gen.spine_leaf(3, 1, 2), False), (gen.spine_leaf(2, 2, 1), True),
    (gen.big_switch(4), False), (gen.torus((3, 3)), True), (gen.rail_optimized(2, 2, 1), False),
    (gen.cross_campus([lambda b: gen.big_switch(2, b), lambda b: gen.spine_leaf(2, 1, 2, b)]), False),
    (gen.cross_campus([lambda b: gen.big_switch(2, b)] * 3), True),
])
def test_is_looped(G, looped):
    assert is_looped(G) is looped


def test_ratios_and_medians():
    replica = {"build_s": 13.0, "teardown_s": 4.0, "peak_memory_mb": 30.0}
    plain = {"build_s": 10.0, "teardown_s": 5.0, "peak_memory_mb": 0.0}
    assert ratios(replica, plain) == {"build_ratio": 1.3, "teardown_ratio": 0.8, "memory_ratio": None}
    assert ratios(replica, None)["build_ratio"] is None
    runs = [{"build_s": 3.0}, {"build_s": 1.0}, {"build_s": 2.0}]
    assert median_run(runs) == {"build_s": 2.0}


def test_bench_build_is_registered(capsys):
    from testbed import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "build", "--help"])
    assert exc.value.code == 0
    assert "plain Mininet" in capsys.readouterr().out


def _doc(spec, nodes, links, build, teardown, plain=None):
    replica = {"build_s": build, "teardown_s": teardown, "peak_memory_mb": 40.5}
    doc = {"spec": spec, "nodes": nodes, "links": links, "replica": replica, "plain": plain,
           "load_before": "0.78, 0.52, 0.24", "load_after": "1.60, 0.83, 0.38"}
    doc.update(ratios(replica, plain))
    return doc


def test_table_puts_specs_side_by_side_in_the_order_given():
    from testbed.bench.build import table

    plain = {"build_s": 2.0, "teardown_s": 8.0, "peak_memory_mb": 45.0}
    docs = [_doc("fat-tree-k4", 36, 48, 1.5, 2.0, plain), _doc("big-switch", 33, 32, 0.9, 1.25),
            _doc("fat-tree-k16", 1344, 3072, 912.25, 61.5)]
    lines = table(docs)
    assert len(lines) == 2 + len(docs)                          # two header lines, one row per spec
    assert lines[0].split() == ["build", "s", "teardown", "s", "peak", "MB", "replica/plain", "load"]
    assert lines[1].split() == ["spec", "nodes", "links", "replica", "plain", "replica", "plain", "replica",
                                "plain", "build", "teardown", "memory", "before->after"]
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["fat-tree-k4", "big-switch", "fat-tree-k16"]
    assert rows[0] == ["fat-tree-k4", "36", "48", "1.5", "2", "2", "8", "40.5", "45", "0.75", "0.25", "0.9",
                       "0.78->1.60"]
    assert rows[2][:7] == ["fat-tree-k16", "1344", "3072", "912.25", "-", "61.5", "-"]  # no plain: dashes
    assert rows[2][9:12] == ["-", "-", "-"]
    # right-aligned columns: every row's numbers end where the header's labels do
    header = lines[1] + " "
    ends = [i for i in range(len(lines[1])) if header[i] != " " and header[i + 1] == " "]
    for line in lines[2:]:
        assert [i for i in ends[1:] if i < len(line) and line[i] != " "] == ends[1:]


def test_bench_build_refuses_a_bad_spec_among_good_ones_before_building(capsys, monkeypatch):
    from testbed import cli
    from testbed.bench import build

    def built(*_):
        raise AssertionError("a replica was built for a refused list")

    monkeypatch.setattr(build, "_spec_bench", built)

    assert cli.main(["bench", "build", "fat-tree-k4", "no-such-fabric", "fat-tree-k8"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no-such-fabric" in err and "Traceback" not in err


def test_bench_build_refuses_a_bmv2_spec_before_building(capsys, monkeypatch):
    from testbed import cli
    from testbed.bench import build

    monkeypatch.setattr(build, "_spec_bench", lambda *_: pytest.fail("built"))
    assert cli.main(["bench", "build", "fat-tree-k4", "long-haul"]) == 2
    err = capsys.readouterr().err
    assert "long-haul" in err and "bmv2" in err and len(err.strip().splitlines()) == 1
