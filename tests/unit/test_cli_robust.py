"""No traceback for a user's mistake, anywhere.

* Every sub-command's ``--help`` prints and exits 0 (the commands are discovered from the parser, so a new
  noun or verb is covered without editing this file; every scenario's ``testbed run NAME --help`` too).
* A corpus of bad inputs (files, flags, paths) exits 2 with one line on stderr that names the field or flag,
  and nothing reaches emulation (the run registry is booby-trapped).
* A bug of the testbed itself is reported as one line naming a crash log, never a bare traceback.
"""

from __future__ import annotations

import argparse
import io
from contextlib import redirect_stderr, redirect_stdout

import pytest

from testbed import cli
from testbed.emu import registry
from testbed.scenario import available


def _subcommand_paths(parser: argparse.ArgumentParser, prefix=()):
    """Every path of sub-command names under ``parser`` (("topo",), ("topo", "show"), ...)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = (*prefix, name)
                yield path
                yield from _subcommand_paths(sub, path)


HELP_PATHS = sorted(set(_subcommand_paths(cli.build_parser())))


def _main(argv):
    """Run the CLI in-process: (exit code, stdout, stderr), SystemExit included."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def no_emulation(monkeypatch):
    """A bad input must be refused before anything is built: entering a run registry fails the test."""
    def trap(self):
        raise AssertionError(f"bad input reached emulation (run registry {self.name!r})")
    monkeypatch.setattr(registry.RunRegistry, "__enter__", trap)


def test_walk_finds_the_nouns_and_verbs():
    # The walk is what makes the help test cover new commands; check it really descends.
    assert {("topo",), ("topo", "show"), ("link", "plan"), ("bench", "build"), ("results",)} <= set(HELP_PATHS)


@pytest.mark.parametrize("path", HELP_PATHS, ids=" ".join)
def test_every_subcommand_help(path):
    code, out, err = _main([*path, "--help"])
    assert code == 0, err
    assert "usage:" in out and "Traceback" not in out + err and "internal error" not in err


@pytest.mark.parametrize("name", available())
def test_every_scenario_help(name):
    code, out, err = _main(["run", name, "--help"])
    assert code == 0, err
    assert "--quick" in out and "Traceback" not in out + err


def _spec_files(tmp):
    deep = {"a": 1}
    for _ in range(40):
        deep = {"x": deep}
    import yaml

    files = {
        "binary": b"\x7fELF\x02\x01\x01\x00\x00\x00" * 50,
        "latin1": "name: caf\xe9\nkind: fat-tree\n".encode("latin-1"),
        "nested-flow": b"[" * 800 + b"]" * 800,
        "nested-block": yaml.safe_dump(deep).encode(),
        "self-anchor": b"a: &a [*a]\n",
        "not-a-mapping": b"- 1\n- 2\n",
        "bad-yaml": b"name: [unclosed\n",
        "huge": b"# " + b"x" * (2 << 20) + b"\n",
        "bad-k": b"name: x\nkind: fat-tree\nparams: {k: 3}\n",
        "unknown-kind": b"name: x\nkind: hypercube\n",
        "nan-rate": b"name: x\nkind: fat-tree\nparams: {k: 4}\nlinks: {default: {rate: .nan}}\n",
        "inf-distance": b"name: x\nkind: fat-tree\nparams: {k: 4}\nlinks: {host: {distance: .inf}}\n",
    }
    paths = {}
    for name, data in files.items():
        p = tmp / f"{name}.yaml"
        p.write_bytes(data)
        paths[name] = str(p)
    return paths


SPEC_CASES = ["binary", "latin1", "nested-flow", "nested-block", "self-anchor", "not-a-mapping", "bad-yaml",
              "huge", "bad-k", "unknown-kind", "nan-rate", "inf-distance"]


@pytest.mark.parametrize("case", SPEC_CASES)
@pytest.mark.parametrize("verb", ["show", "draw"])
def test_bad_spec_files_are_one_line_exit_2(tmp_path, case, verb):
    spec = _spec_files(tmp_path)[case]
    argv = ["topo", verb, spec] + (["--out", str(tmp_path / "f.png")] if verb == "draw" else [])
    code, out, err = _main(argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("testbed: "), err
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "f.png").exists()


#: name -> (argv built from (tmp folder, a plain file in it), a word the message must contain: flag/field)
BAD_ARGV = {
    "draw-txt": (lambda t, f: ["topo", "draw", "fat-tree-k4", "--out", f"{t}/x.txt"], "--out"),
    "draw-no-suffix": (lambda t, f: ["topo", "draw", "fat-tree-k4", "--out", f"{t}/x"], "--out"),
    "draw-under-file": (lambda t, f: ["topo", "draw", "fat-tree-k4", "--out", f"{f}/x.png"], "--out"),
    "draw-into-proc": (lambda t, f: ["topo", "draw", "fat-tree-k4", "--out", "/proc/no-such/x.png"], "--out"),
    "show-dir": (lambda t, f: ["topo", "show", str(t)], "spec"),
    "demo-spines-0": (lambda t, f: ["run", "demo", "--spines", "0"], "--spines"),
    "demo-spines-neg": (lambda t, f: ["run", "demo", "--spines", "-3"], "--spines"),
    "demo-spines-word": (lambda t, f: ["run", "demo", "--spines", "two"], "--spines"),
    "demo-out-under-file": (lambda t, f: ["run", "demo", "--out", f"{f}/r"], "--out"),
    "cnp-size-0": (lambda t, f: ["run", "long_haul_cnp", "--size", "0"], "--size"),
    "cnp-iters-0": (lambda t, f: ["run", "long_haul_cnp", "--iters", "0"], "--iters"),
    "cnp-iters-neg": (lambda t, f: ["run", "long_haul_cnp", "--iters", "-4"], "--iters"),
    "cnp-pps-nan": (lambda t, f: ["run", "long_haul_cnp", "--bench-pps", "nan"], "--bench-pps"),
    "failover-size-0": (lambda t, f: ["run", "fabric_failover", "--size", "0"], "--size"),
    "failover-out-under-file": (lambda t, f: ["run", "fabric_failover", "--out", f"{f}/r"], "--out"),
    "link-rate": (lambda t, f: ["link", "plan", "--rate", "fast"], "rate"),
    "unknown-scenario": (lambda t, f: ["run", "nope"], "nope"),
    "unknown-noun": (lambda t, f: ["frobnicate"], "frobnicate"),
    # Every benchmark refuses a bad flag or spec before it builds anything (and before asking for root).
    "bench-build-repeat-0": (lambda t, f: ["bench", "build", "fat-tree-k4", "--repeat", "0"], "--repeat"),
    "bench-build-no-spec": (lambda t, f: ["bench", "build", f"{t}/none.yaml"], "none.yaml"),
    "bench-build-huge": (lambda t, f: ["bench", "build", _huge(t)], "interfaces"),
    "bench-build-links": (lambda t, f: ["bench", "build", "--links", "netem"], "--links"),
    "bench-failover-reps-0": (lambda t, f: ["bench", "failover", "fat-tree-k4", "--repetitions", "0"], "--repetitions"),
    "bench-failover-interval": (lambda t, f: ["bench", "failover", "fat-tree-k4", "--interval", "5"], "--interval"),
    "bench-failover-no-pods": (lambda t, f: ["bench", "failover", "spine-leaf"], "pods"),
    "bench-link-cores": (lambda t, f: ["bench", "link", "--cores", "fortran"], "--cores"),
    "bench-p4-sizes": (lambda t, f: ["bench", "p4", "--sizes", "big"], "--sizes"),
    "bench-p4-duration": (lambda t, f: ["bench", "p4", "--duration", "-1"], "--duration"),
    "bench-p4-binary": (lambda t, f: ["bench", "p4", "--binary", "slow"], "--binary"),
    "bench-agg-workers": (lambda t, f: ["bench", "agg", "--workers", "1"], "--workers"),
    "bench-agg-elems": (lambda t, f: ["bench", "agg", "--elems", "7"], "--elems"),
    "bench-rdma-rate": (lambda t, f: ["bench", "rdma", "--rate", "fast"], "--rate"),
    "bench-rdma-mtu": (lambda t, f: ["bench", "rdma", "--mtu", "1500"], "--mtu"),
    "bench-rdma-size": (lambda t, f: ["bench", "rdma", "--size", "0"], "--size"),
    "bench-unknown": (lambda t, f: ["bench", "warp"], "warp"),
    # Numbers beyond a float, ports beyond 16 bits, folders given as files: each once an internal error.
    "cost-hosts-inf": (lambda t, f: ["topo", "cost", "--hosts", "inf"], "--hosts"),
    "cost-hosts-overflow": (lambda t, f: ["topo", "cost", "--hosts", "1e400"], "--hosts"),
    "bench-collective-sizes-overflow": (lambda t, f: ["bench", "collective", "--sizes", "1e400"], "--sizes"),
    "link-plan-queue-overflow": (lambda t, f: ["link", "plan", "--queue", "1e400"], "queue"),
    "pfc-headroom-rate-overflow": (lambda t, f: ["pfc", "headroom", "--rate", "1e400"], "--rate"),
    "pfc-headroom-huge-spec": (lambda t, f: ["pfc", "headroom", _huge_rails(t)], "500,000"),
    "plan-scale-inf": (lambda t, f: ["plan", "fat-tree-k4", "--scale", "inf"], "--scale"),
    "controller-api-port-neg": (lambda t, f: ["controller", "status", "--api-port", "-1"], "--api-port"),
    "controller-api-port-huge": (lambda t, f: ["controller", "status", "--api-port", "9" * 20], "--api-port"),
    "p4-thrift-port-neg": (lambda t, f: ["p4", "counters", "--thrift-port", "-1"], "--thrift-port"),
    "p4-compile-missing": (lambda t, f: ["p4", "compile", f"{t}/none.p4"], "PROGRAM"),
    "rdma-server-port-neg": (lambda t, f: ["rdma", "server", "--port", "-1"], "--port"),
    "rdma-roce-port-huge": (lambda t, f: ["rdma", "write-bw", "127.0.0.1", "--roce-port", "65536"], "--roce-port"),
    "link-stats-folder": (lambda t, f: ["link", "stats", str(t)], "not a delay-line stats file"),
    "collective-schedule-size-huge": (lambda t, f: ["collective", "schedule", "--size", "9" * 20], "--size"),
    "collective-schedule-chunks-huge": (lambda t, f: ["collective", "schedule", "--chunks", "9" * 20], "chunks"),
    "collective-place-jobs-huge": (lambda t, f: ["collective", "place", "--jobs", "9" * 20], "--jobs"),
    "collective-run-jobs-huge": (lambda t, f: ["collective", "run", "--jobs", "9" * 20], "--jobs"),
    "collective-run-chunks-huge": (lambda t, f: ["collective", "run", "--chunks", "5000"], "--chunks"),
}


def _huge_rails(tmp) -> str:
    """A rail-optimized fabric of 8 million NICs: a kind that once had no closed-form size."""
    path = tmp / "rails.yaml"
    path.write_text("name: rails\nkind: rail-optimized\nparams: {servers: 1000000, gpus_per_server: 8}\n")
    return str(path)


def _huge(tmp) -> str:
    path = tmp / "k64.yaml"
    path.write_text("name: k64\nkind: fat-tree\nparams: {k: 64}\n")
    return str(path)


@pytest.mark.parametrize("case", BAD_ARGV)
def test_bad_flags_and_paths_are_one_line_exit_2(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)  # a scenario's default results folder would land here
    a_file = tmp_path / "plain-file"
    a_file.write_text("x")
    make, word = BAD_ARGV[case]
    argv = make(tmp_path, a_file)
    code, out, err = _main(argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("testbed"), err
    assert word in lines[0] and "Traceback" not in err
    assert not (tmp_path / "results").exists()  # refused before any results folder was made


def test_a_bug_prints_the_crash_log_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_CRASH_DIR", str(tmp_path))

    def boom(args):
        raise ZeroDivisionError("deliberate")

    err_buf = io.StringIO()
    with redirect_stderr(err_buf):
        code = cli.run_guarded(boom, None)
    err = err_buf.getvalue()
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "internal error (ZeroDivisionError: deliberate)" in lines[0]
    assert "report" in lines[0] and "Traceback" not in err
    logs = list(tmp_path.glob("scaleout-testbed-crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in lines[0]
    assert "ZeroDivisionError: deliberate" in logs[0].read_text() and "Traceback" in logs[0].read_text()


def test_a_help_string_with_a_stray_percent_is_a_reported_bug(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_CRASH_DIR", str(tmp_path))
    real = cli.build_parser

    def with_bad_help():
        parser = real()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["topo"].add_argument("--bad", help="drop 5% of frames")
        return parser

    monkeypatch.setattr(cli, "build_parser", with_bad_help)
    code, out, err = _main(["topo", "--help"])
    assert code == 1 and "unescaped '%'" in err and "Traceback" not in err
    assert len(list(tmp_path.glob("scaleout-testbed-crash-*.log"))) == 1
