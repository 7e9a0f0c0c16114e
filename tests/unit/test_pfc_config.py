"""The spec's pfc: block: defaults, DSCP map, watchdog, errors naming the dotted field, CLI exit 2."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from testbed import cli
from testbed.errors import SpecError
from testbed.pfc.config import CNP_DSCP, CNP_PRIORITY, ROCE_DSCP, ROCE_PRIORITY, PfcConfig, WatchdogParams
from testbed.topo.spec import parse_spec

BASE = {"name": "t", "kind": "spine-leaf", "params": {"leaves": 2, "spines": 1, "hosts_per_leaf": 2}}


def test_defaults_match_nvidia_roce_and_the_spec_block_parses():
    spec = parse_spec({**BASE, "mtu": 9000, "pfc": {"priorities": [3], "xoff": "200KB"}})
    pfc = spec.pfc
    assert pfc.priorities == (3,) and pfc.xoff_bytes == 200e3
    assert pfc.xon_bytes == 200e3 - 2 * (9000 + 38)          # default hysteresis: two maximum frames
    assert pfc.headroom_bytes is None                          # auto
    assert pfc.priority_of(ROCE_DSCP) == ROCE_PRIORITY == 3
    assert pfc.priority_of(CNP_DSCP) == CNP_PRIORITY == 6
    assert pfc.priority_of(0) == 0 and pfc.watchdog is None
    assert parse_spec(BASE).pfc is None                        # off unless asked for
    with pytest.raises(dataclasses.FrozenInstanceError):
        pfc.xoff_bytes = 1


def test_every_key():
    pfc = PfcConfig.from_spec({"priorities": [4, 3], "xoff": "100KB", "xon": "90KB", "headroom": "2MB",
                               "quanta": 1000, "dscp": {10: 4}, "watchdog": {"detect": "100ms", "action": "ignore"}},
                              buffer_bytes=32e6)
    assert pfc.priorities == (3, 4) and pfc.xon_bytes == 90e3 and pfc.headroom_bytes == 2e6 and pfc.quanta == 1000
    assert pfc.priority_of(10) == 4 and pfc.priority_of(26) == 3
    assert pfc.watchdog == WatchdogParams(detect_s=0.1, restore_s=0.2, action="ignore")
    doc = pfc.to_dict()
    assert doc["dscp"] == {10: 4} and doc["watchdog"]["action"] == "ignore"


INVALID = [
    ({"colour": 1}, "pfc.colour"),
    ({"priorities": []}, "pfc.priorities"),
    ({"priorities": [8]}, "pfc.priorities[0]"),
    ({"priorities": [3, 3]}, "pfc.priorities"),
    ({"priorities": ["3"]}, "pfc.priorities[0]"),
    ({"xoff": "fast"}, "pfc.xoff"),
    ({"xoff": "100B"}, "pfc.xoff"),
    ({"xoff": "100KB", "xon": "100KB"}, "pfc.xon"),
    ({"headroom": "manual"}, "pfc.headroom"),
    ({"headroom": "10B"}, "pfc.headroom"),
    ({"xoff": "100KB", "headroom": "40MB"}, "pfc.headroom"),   # exceeds buffer: 32MB
    ({"quanta": 0}, "pfc.quanta"),
    ({"quanta": 70000}, "pfc.quanta"),
    ({"dscp": {64: 3}}, "pfc.dscp.64"),
    ({"dscp": {26: 9}}, "pfc.dscp.26"),
    ({"dscp": [26]}, "pfc.dscp"),
    ({"watchdog": {"action": "reboot"}}, "pfc.watchdog.action"),
    ({"watchdog": {"detect": "0ms"}}, "pfc.watchdog.detect"),
    ({"watchdog": {"restore": "soon"}}, "pfc.watchdog.restore"),
    ({"watchdog": {"poll": "1ms"}}, "pfc.watchdog.poll"),
    ("on", "pfc"),
]


@pytest.mark.parametrize("block,field", INVALID, ids=[f for _, f in INVALID])
def test_invalid_pfc_block_names_the_field(block, field):
    with pytest.raises(SpecError) as err:
        parse_spec({**BASE, "buffer": "32MB", "pfc": block})
    assert err.value.field == field and err.value.exit_code == 2


@pytest.mark.parametrize("block,field", INVALID[:3] + INVALID[-4:-1], ids=[f for _, f in INVALID[:3] + INVALID[-4:-1]])
def test_invalid_pfc_block_through_cli_exits_2(block, field, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, "pfc": block}))
    assert cli.main(["topo", "show", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and field in err
