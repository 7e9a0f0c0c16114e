"""``testbed rdma perftest-client`` against ``perftest-server`` over loopback: the whole perftest 6.06
exchange from both ends (testbed/rdma/perftest.py, perftest_client.py), every byte that moved checked
against what the other side reports. Against ib_*_bw servers on kernel rxe: tests/vm/guest/test_rxe_interop.py."""

from __future__ import annotations

import json
import socket

import pytest

from testbed.cli import main
from testbed.rdma.perftest import serve_perftest
from testbed.rdma.perftest_client import perftest_client, report_text
from testbed.rdma.qp import QpConfig
from tests.unit.loopback import free_udp, serve_in_thread

ITERS = 40


def _pair(verb: str, size: int, qps: int, config: QpConfig | None = None, **client) -> tuple[dict, dict]:
    """serve_perftest in a thread, perftest_client against it; (client's report, server's report)."""
    p_server, p_client = free_udp(), free_udp()
    box, thread = serve_in_thread(serve_perftest, verb, size, qps, "127.0.0.1", 0, config, roce_port=p_server, peer_roce_port=p_client,
                          timeout=60, seed=11)
    c = perftest_client("127.0.0.1", verb, size, qps, ITERS, box["port"], config, roce_port=p_client,
                        peer_roce_port=p_server, timeout=60, seed=3, **client)
    thread.join(30)
    s = box["server"]
    assert "error" not in s, s
    assert c["done"] and s["done"] and c["qp_states"] == s["qp_states"] == ["rts"] * qps
    assert [q["qpn"] for q in c["remote"]] == [q["qpn"] for q in s["local"]]
    assert [q["qpn"] for q in c["local"]] == [q["qpn"] for q in s["remote"]]
    return c, s


@pytest.mark.parametrize("size,qps,loss", [(1000, 2, 0.0), (65536, 1, 0.0), (3000, 2, 0.02)],
                         ids=["4-slots-q2", "64KiB", "lossy-q2"])
def test_write_leaves_the_servers_region_as_the_client_says(size, qps, loss):
    cfg = QpConfig(loss=loss, seed=5, timeout=0.02) if loss else None
    c, s = _pair("write", size, qps, cfg)
    assert c["sha256_written"] == s["sha256_region"] and c["region_bytes"] == s["region_bytes"]
    assert s["client_report"]["iters"] == ITERS * qps and s["client_report"]["size"] == size   # as perftest: all QPs
    assert s["client_report"]["bw_avg_MBps"] == pytest.approx(c["bw_avg_MBps"])
    if loss:
        assert c["retransmissions"] > 0
    assert "BW average[MB/sec]" in report_text(c)


@pytest.mark.parametrize("size,qps", [(4096, 2), (1000, 1)])
def test_read_brings_back_the_servers_random_region(size, qps):
    c, s = _pair("read", size, qps)
    assert c["every_slot_read"] and c["sha256_read"] == s["sha256_served"]
    assert c["server_report"]["iters"] == 0   # a half-duplex server sends its never-filled report


def test_send_payloads_arrive_in_order():
    c, s = _pair("send", 4096, 1)
    assert s["received_sends"] == ITERS and c["sha256_sends"] == [s["sha256_sends"]]
    assert s["client_report"] == {} and c["server_report"] == {}


@pytest.mark.parametrize("op,qps", [("faa", 2), ("cas", 1)])
def test_atomics_on_the_servers_random_words(op, qps):
    """Fetch-and-add adds 1 per atomic to each slot's random word; perftest's CAS (compare 0, swap 0)
    leaves non-zero words alone. The originals the client saw are the server's words, in order."""
    c, s = _pair("atomic", 8, qps, atomic=op)
    before, after = bytes.fromhex(s["region_before"]), bytes.fromhex(s["region_after"])
    span = len(before) // qps
    assert s["atomics_rx"] == ITERS * qps and c["atomic_in_order"]
    for i, seen in enumerate(c["atomic_slots"]):
        assert sum(count for _first, _last, count, _ok in seen.values()) == ITERS
        for slot, (first, last, count, _ok) in seen.items():
            at = i * span + int(slot) * 64
            word_before = int.from_bytes(before[at:at + 8], "little")
            word_after = int.from_bytes(after[at:at + 8], "little")
            assert first == word_before
            if op == "faa":
                assert last == first + count - 1 and word_after == word_before + count
            else:
                assert last == first and word_after == word_before != 0
    if op == "faa":   # the slots between the words were never touched
        assert sum(a != b for a, b in zip(before, after, strict=True)) <= 8 * 64 * qps


def test_cli_client_and_its_bad_input(capsys):
    """The CLI with perftest's own ports: the server on 127.0.0.2, the client's side on 127.0.0.1 (the
    address the kernel picks towards 127.0.0.2), each its own RoCE port 4791."""
    box, thread = serve_in_thread(serve_perftest, "write", 2048, 1, "127.0.0.2", 0, timeout=60)
    rc = main(["rdma", "perftest-client", "127.0.0.2", "--verb", "write", "-s", "2048", "-n", "9",
               "-p", str(box["port"]), "--json"])
    thread.join(30)
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["iters"] == doc["iters_per_qp"] == 9 and doc["sha256_written"] == box["server"]["sha256_region"]
    for bad, field in ((["-q", "0"], "--qps"), (["-u", "40"], "--qp-timeout"), (["-s", "0"], "--size")):
        assert main(["rdma", "perftest-client", "127.0.0.1"] + bad) == 2
        err = capsys.readouterr().err
        assert field in err and "Traceback" not in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["rdma", "perftest-client", "127.0.0.1", "-p", str(port)]) == 1
    assert "perftest-server" in capsys.readouterr().err
