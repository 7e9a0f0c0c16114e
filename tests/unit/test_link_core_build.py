"""Building and choosing the link core: a core that fails to build falls back to the Python line with one
warning naming the compiler log; the command line carries the model exactly (issue 12)."""

from __future__ import annotations

import os
import stat

import pytest

from testbed.errors import SpecError
from testbed.links import core
from testbed.links.model import LinkParams, LossModel, RedParams


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_P4_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TESTBED_LINK_CORE", raising=False)
    core._built.cache_clear()
    core._warn_once.cache_clear()
    yield tmp_path
    core._built.cache_clear()
    core._warn_once.cache_clear()


def _broken_compiler(tmp_path) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("cc", "gcc"):
        cc = bindir / name
        cc.write_text("#!/bin/sh\necho 'linkcore.c:1: error: this compiler is broken on purpose' >&2\nexit 1\n")
        cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    return str(bindir)


def test_failed_build_falls_back_to_python_with_one_warning_naming_the_log(fresh_cache, monkeypatch, capsys):
    monkeypatch.setenv("PATH", _broken_compiler(fresh_cache) + os.pathsep + os.environ["PATH"])
    which, argv = core.line_argv("a0", "b0", LinkParams(delay_s=0.01), "stats.json")
    assert which == "python" and argv[1:3] == ["-m", "testbed.links.delayline"]
    core.line_argv("a0", "b0", LinkParams(delay_s=0.01), "stats.json")  # a second link: no second warning
    err = capsys.readouterr()
    lines = [ln for ln in (err.out + err.err).splitlines() if "warning" in ln]
    assert len(lines) == 1, lines
    log = core.binary_path().with_suffix(".log")
    assert str(log) in lines[0] and "broken on purpose" in log.read_text()
    assert not core.binary_path().exists()
    which, detail = core.selected_core(warn=False)
    assert which == "python" and str(log) in detail


def test_the_system_compiler_builds_the_core_and_it_is_the_default(fresh_cache):
    which, argv = core.line_argv("a0", "b0", LinkParams(delay_s=0.01), "stats.json", seed=3)
    assert which == "c"
    assert argv[0] == str(core.binary_path()) and argv[1] == "forward" and os.access(argv[0], os.X_OK)


def test_unknown_core_is_a_spec_error(fresh_cache, monkeypatch):
    monkeypatch.setenv("TESTBED_LINK_CORE", "fpga")
    with pytest.raises(SpecError, match="TESTBED_LINK_CORE"):
        core.selected_core()


def test_model_args_carry_every_parameter_exactly():
    params = LinkParams(rate_bps=1e8 / 3, delay_s=0.1 / 3, jitter_s=1e-4, limit=150_000, limit_unit="bytes",
                        red=RedParams(kmin=1000.5, kmax=9000, pmax=1 / 7, unit="bytes", ecn=False),
                        loss=LossModel(kind="gilbert-elliott", p=0.01, r=0.3, loss_bad=0.9, loss_good=1e-5))
    args = core.core_model_args(params)
    opts = dict(zip(args[::2], args[1::2], strict=True))
    assert float(opts["--rate-bps"]) == params.rate_bps and float(opts["--delay"]) == params.delay_s
    assert opts["--limit-unit"] == "bytes" and float(opts["--limit"]) == 150_000
    kmin, kmax, pmax, unit, ecn = opts["--red"].split(",")
    assert (float(kmin), float(kmax), float(pmax), unit, ecn) == (1000.5, 9000, 1 / 7, "bytes", "0")
    assert opts["--loss"].split(",")[0] == "ge" and float(opts["--loss"].split(",")[-1]) == 1e-5
    assert "--loss" not in core.core_model_args(LinkParams(loss=LossModel(rate=0.0)))  # inactive: no loss


def test_direction_seeds_follow_the_link_seed():
    assert core.direction_seeds(7) == core.direction_seeds(7)
    assert core.direction_seeds(7) != core.direction_seeds(8)
    a, b = core.direction_seeds(7)
    assert a != b
