"""``testbed pfc headroom|deadlock``: JSON on stdout, exit codes, one-line errors."""

from __future__ import annotations

import json

import pytest

from testbed import cli


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_headroom_of_one_port_as_json(capsys):
    code, out, _ = run(capsys, "pfc", "headroom", "--rate", "100G", "--distance", "30km", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["bytes"] == 3_779_914 and doc["distance_m"] == 30e3   # by hand: docs/pfc.md
    code, out, _ = run(capsys, "pfc", "headroom", "--rate", "400G", "--mtu", "9000", "--response", "1us", "--json")
    assert json.loads(out)["bytes"] == 3 * 9038 + 84 + 50_000


def test_headroom_of_every_port_of_a_spec(capsys):
    code, out, _ = run(capsys, "pfc", "headroom", "cross-campus-30km", "--json")
    doc = json.loads(out)
    assert code == 0
    sizes = [d["bytes"] for ports in doc["ports"].values() for d in ports.values()]
    long_haul = [d for ports in doc["ports"].values() for d in ports.values()
                 if d["one_way_delay_s"] == pytest.approx(150e-6)]
    assert len(long_haul) >= 2 and min(sizes) < 50_000                # DCI ends vs short intra-campus cables
    assert all(d["bytes"] == 15_062_618 for d in long_haul)          # 30 km at 400G, by hand (docs/pfc.md)


def test_deadlock_exit_codes_and_json(capsys):
    code, out, _ = run(capsys, "pfc", "deadlock", "spine-leaf", "--json")
    assert code == 0 and json.loads(out)["deadlock_free"] is True
    code, out, _ = run(capsys, "pfc", "deadlock", "spine-leaf", "--fail", "l0-s0", "--fail", "l1-s1", "--json")
    doc = json.loads(out)
    assert code == 1 and not doc["deadlock_free"] and doc["failed"] == [["l0", "s0"], ["l1", "s1"]]
    code, out, _ = run(capsys, "pfc", "deadlock", "torus-2d", "--json")
    assert code == 1 and json.loads(out)["cycles"][0]["priority"] == 3


@pytest.mark.parametrize("argv,word", [
    (["pfc", "headroom", "--rate", "fast"], "--rate"),
    (["pfc", "headroom"], "--rate"),
    (["pfc", "headroom", "spine-leaf", "--rate", "100G"], "not both"),
    (["pfc", "headroom", "--rate", "100G", "--mtu", "50"], "--mtu"),
    (["pfc", "deadlock", "spine-leaf", "--fail", "l0-l1"], "--fail"),
    (["pfc", "deadlock", "no-such-spec"], "no spec file"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, word):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and word in err
