"""tests/conftest.py's markers: a missing tool or capability skips, and under ``TESTBED_STRICT=1`` (.ci/run)
fails, so a setup that failed to install something cannot leave CI green. Run against the real conftest in
a pytester sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()
TESTS = '''
import pytest

@pytest.mark.tool("no-such-tool-14")
def test_missing_tool():
    pass

@pytest.mark.tool("sh")
def test_present_tool():
    pass

def test_unmarked():
    pass
'''


@pytest.fixture
def sandbox(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    tool(name): needs these programs on PATH\n")
    pytester.makepyfile(test_marked=TESTS)
    return pytester


def test_missing_tool_skips_with_its_name(sandbox, monkeypatch):
    monkeypatch.delenv("TESTBED_STRICT", raising=False)
    res = sandbox.runpytest("-ra", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2, skipped=1)
    res.stdout.fnmatch_lines(["*SKIPPED*no-such-tool-14 is not installed*"])


def test_strict_turns_the_skip_into_a_failure(sandbox, monkeypatch):
    monkeypatch.setenv("TESTBED_STRICT", "1")
    res = sandbox.runpytest("-ra", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2, errors=1)   # failed in setup, before the test ran
    res.stdout.fnmatch_lines(["*no-such-tool-14 is not installed*TESTBED_STRICT: this machine must have it*"])

