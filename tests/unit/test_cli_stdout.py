"""Data goes to stdout, so `> file`, `| grep` and `| less` work; stderr keeps progress and hints."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import cli

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, word", [
    (["topo", "list"], "fat-tree-k4"),
    (["topo", "show", "fat-tree-k4"], "bisection"),
    (["link", "plan", "--rate", "100G", "--distance", "10km", "--scale", "1000"], "emulated"),
    (["results", "{tmp}"], "no runs"),
    (["topo", "cost", "--kinds", "fat-tree", "--hosts", "1k"], "fat-tree"),
    (["topo", "cost", "--kinds", "fat-tree", "--hosts", "1k", "--validate"], "DeepSeek"),
    (["plan", "fat-tree-k4", "--assume"], "switches"),
    (["pfc", "headroom", "--rate", "100G", "--distance", "10km"], "per lossless priority"),
    (["pfc", "headroom", "fat-tree-k4"], "fits buffer"),
    (["pfc", "deadlock", "fat-tree-k4"], "cyclic buffer dependency"),
])
def test_data_commands_print_on_stdout(tmp_path, capsys, argv, word):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert word in captured.out + captured.err
    if word != "no runs":  # an empty listing is a hint, on stderr
        assert word in captured.out


def test_doctor_table_on_stdout():
    argv = [sys.executable, "-m", "testbed.cli", "doctor"]
    if os.geteuid() == 0:  # as root doctor would probe (namespaces, bridges): check the non-root path
        if not shutil.which("setpriv"):
            pytest.fail("setpriv (util-linux) is needed to drop root; `make setup` installs it")
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=+dac_read_search",
                "--ambient-caps=+dac_read_search", *argv]
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(REPO), HOME="/tmp"))
    assert res.returncode == 0, res.stderr
    assert "capability" in res.stdout and "backends:" in res.stdout


PFC_SPEC = """name: sl-pfc
kind: spine-leaf
params: {leaves: 2, spines: 2, hosts_per_leaf: 2, oversubscription: 1}
links:
  host: {rate: 100G, distance: 2m}
  leaf-spine: {distance: 10km}
buffer: 1MB
scale: 1000
pfc: {priorities: [3], xoff: 100KB}
"""


@pytest.mark.parametrize("json_mode", [False, True])
def test_plan_of_a_pfc_spec_shows_headroom_and_that_it_is_applied(tmp_path, capsys, json_mode):
    import json
    import re

    spec = tmp_path / "sl-pfc.yaml"
    spec.write_text(PFC_SPEC)
    assert cli.main(["plan", str(spec), "--assume", *(["--json"] if json_mode else [])]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err                                 # applied: nothing to warn about
    if json_mode:                                                        # stdout: exactly one document
        doc = json.loads(captured.out)
        assert doc["pfc"]["applied"] is True and doc["pfc"]["ports_over_buffer"] == 8
        assert len(doc["pfc"]["ports"]) == 12 and doc["warnings"] == []
    else:                                                                # stdout: the table and the note
        out = " ".join(captured.out.split())
        assert "PFC (planned, applied)" in out and "note: pfc: applied in the link nodes" in out
        assert "PFC in the link nodes: 8 links, 12 switch ports relay PAUSE" in out   # where it runs
        assert re.search(r"l0 > s0\W+switch\W+100 KB\W+60\.33 KB \+ [\d.]+ [KM]B\W+h0, h1", out), out
        assert re.search(r"1\.28 MB\W+8\W+no\W", out) and re.search(r"30\.16 KB\W+4\W+yes\W", out)


def test_plan_serialise_puts_every_rated_link_of_a_bmv2_fabric_in_a_link_node(capsys):
    """``testbed plan --serialise``: the 3 m host links (below the delay line's floor, so without it plain
    veths shaped by HTB) become link nodes at the rate, and the plan says why."""
    import json

    assert cli.main(["plan", "long-haul", "--assume", "--json"]) == 0
    plain = {e["tier"]: e for e in json.loads(capsys.readouterr().out)["links"]}
    assert plain["host"]["backend"] == "htb"
    assert cli.main(["plan", "long-haul", "--assume", "--json", "--serialise"]) == 0
    links = json.loads(capsys.readouterr().out)["links"]
    assert {e["backend"] for e in links} == {"userspace"}
    host = [e for e in links if e["tier"] == "host"]
    assert all("serialis" in e["reason"] for e in host), [e["reason"] for e in host]
