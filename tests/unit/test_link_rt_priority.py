"""A link core's real-time priority has one source, its command line: the core sets it from there, and the
run registry raises the softirq threads above what it reads there (testbed.links.core.rt_priority_of,
testbed.links.wire.spawn_core)."""

from pathlib import Path

import pytest

from testbed.links import core, delayline
from testbed.links.model import LinkParams
from testbed.links.wire import spawn_core

PARAMS = LinkParams(rate_bps=10e6, delay_s=0.001)


@pytest.fixture
def fake_build(monkeypatch):
    """The compiled core "built" without a compiler: its argv is all these tests read."""
    monkeypatch.setattr(core, "build", lambda: Path("/nonexistent/linkcore"))


class FakeRun:
    def __init__(self):
        self.calls = []

    def spawn(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        return "proc"


@pytest.mark.parametrize("which", ["python", "c", "bare"])
def test_every_core_carries_the_priority_once(fake_build, which):
    got, argv = core.line_argv("a0", "b0", PARAMS, "s.json", core=which)
    assert got == which
    assert argv.count("--rt-priority") == 1
    assert core.rt_priority_of(argv) == delayline.DEFAULT_RT_PRIORITY
    _, argv = core.line_argv("a0", "b0", PARAMS, "s.json", core=which, rt_priority=30)
    assert core.rt_priority_of(argv) == 30


def test_the_python_line_runs_at_the_priority_its_argv_says(monkeypatch):
    """The Python line's own parser reads it: the line is built with what the argv says."""
    _, argv = core.line_argv("a0", "b0", PARAMS, "s.json", core="python", rt_priority=42)
    seen = {}

    class Built(Exception):
        pass

    def fake_line(*args, **kwargs):
        seen.update(kwargs)
        raise Built

    monkeypatch.setattr(delayline, "DelayLine", fake_line)
    with pytest.raises(Built):
        delayline.main(argv[3:])
    assert seen["rt_priority"] == 42


def test_options_appended_later_do_not_hide_it(fake_build):
    """The incast fixture appends PFC and wake-up options after line_argv's."""
    _, argv = core.line_argv("a0", "b0", PARAMS, "s.json", core="c", rt_priority=12)
    assert core.rt_priority_of([*argv, "--wake-early", "0.0001", "--pfc-prio", "3"]) == 12


@pytest.mark.parametrize("argv,want", [(["x", "--rt-priority", "7"], 7), (["x", "--rt-priority", "0"], 0),
                                       (["x", "--spin", "1e-4"], None), (["x", "--rt-priority"], None),
                                       (["x", "--rt-priority", "3", "--rt-priority", "9"], 9)])
def test_rt_priority_of(argv, want):
    assert core.rt_priority_of(argv) == want


def test_spawn_core_hands_the_registry_the_cores_own_priority(fake_build, tmp_path):
    run = FakeRun()
    _, argv = core.line_argv("a0", "b0", PARAMS, "s.json", core="c", rt_priority=25)
    assert spawn_core(run, argv, tmp_path / "core.log") == "proc"
    (got, kwargs), = run.calls
    assert got == argv and kwargs["realtime"] == 25 and kwargs["log"] == tmp_path / "core.log"
    assert Path(kwargs["env"]["PYTHONPATH"], "testbed", "links", "wire.py").is_file()
