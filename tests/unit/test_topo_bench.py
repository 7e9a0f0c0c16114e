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
