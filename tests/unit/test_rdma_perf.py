"""perftest-like client and server over loopback sockets (no root): byte-exact writes, sends, latency,
the CLI's JSON and text output, fuzzed datagrams into a live endpoint."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from testbed.cli import main
from testbed.rdma.perf import report_text, run_client, serve
from testbed.rdma.qp import QpConfig


@pytest.fixture
def server():
    """A server thread on loopback, an ephemeral TCP port and ephemeral RoCE ports; serves one client."""
    started = threading.Event()
    box = {}

    def ready(port):
        box["port"] = port
        started.set()

    def run():
        try:
            box["results"] = serve("127.0.0.1", 0, roce_port=0, once=True, ready=ready)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            box["error"] = exc
            started.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    yield box
    thread.join(30)


@pytest.mark.parametrize("test,size", [("write_bw", 100_001), ("send_bw", 5000)])
def test_bandwidth_tests_verify(server, test, size):
    r = run_client("127.0.0.1", test, size, iters=20, port=server["port"], roce_port=0,
                   config=QpConfig(mtu=1024, loss=0.02, seed=5, timeout=0.02), verify=True, tx_depth=4)
    assert r["iterations"] == 20 and r["verified"] is True
    assert r["retransmissions"] > 0 and r["goodput_mbps"] > 0
    if test == "send_bw":
        assert r["server"]["received"] == 20
    assert "BW average[MB/sec]" in report_text(r)
    assert r["pacing_lost_bytes"] == 0 and r["tx_bytes"] >= 20 * size and "pacing:" not in report_text(r)
    late = report_text({**r, "pacing_lost_bytes": r["tx_bytes"] // 9, "pacing_late_max_s": 0.0042})
    assert "pacing: 10.0% of the DCQCN allowance lost to late wake-ups (up to 4.2 ms late)" in late


def test_write_latency(server):
    r = run_client("127.0.0.1", "write_lat", 2, iters=50, port=server["port"], roce_port=0,
                   series_every=1e-4)
    assert r["iterations"] == 50 and 0 < r["t_min_usec"] <= r["t_typical_usec"] <= r["t_max_usec"]
    assert "t_typical[usec]" in report_text(r)
    assert r["series"]["qpn"] == r["local"]["qpn"]


def test_write_latency_with_a_size_mix_reports_every_message_in_the_mix_order(server):
    """A flow-size mix: message n is sizes[n % 3]; every message's size and latency is listed, the bytes
    moved are the mix's (not 6 x the largest), and the data still verifies."""
    from testbed.rdma.perf import RdmaError, check_sizes

    sizes = (3000, 70_000, 500)
    r = run_client("127.0.0.1", "write_lat", 70_000, iters=6, port=server["port"], roce_port=0, verify=True,
                   sizes=sizes)
    assert r["iterations"] == 6 and r["verified"] is True
    assert [m[0] for m in r["message_lat_usec"]] == list(sizes) * 2
    assert all(m[1] > 0 for m in r["message_lat_usec"]) and r["bytes_total"] == 2 * sum(sizes)
    assert 2 * sum(sizes) <= r["tx_bytes"] < 6 * 70_000           # on the wire: the mix, with its headers
    with pytest.raises(RdmaError, match="largest"):
        check_sizes("write_lat", 1000, (100, 2000))
    with pytest.raises(RdmaError, match="write_lat only"):
        check_sizes("write_bw", 2000, (100, 2000))
    with pytest.raises(RdmaError, match="whole numbers"):
        check_sizes("write_lat", 2000, (0, 2000))


def test_cli_write_bw_json(server, capsys, tmp_path):
    series = tmp_path / "s.csv"
    rc = main(["rdma", "write-bw", "127.0.0.1", "--size", "64KB", "--iters", "10", "--port", str(server["port"]),
               "--roce-port", "0", "--verify", "--dcqcn", "--line-rate", "10G", "--series", str(series), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["verified"] and doc["iterations"] == 10 and doc["bytes"] == 64000
    assert series.read_text().startswith("t,rate_bps")


def test_cli_rejects_bad_values(capsys):
    assert main(["rdma", "write-bw", "127.0.0.1", "--size", "lots"]) == 2
    assert main(["rdma", "write-bw", "127.0.0.1", "--loss", "150%"]) == 2
    assert main(["rdma", "write-bw", "127.0.0.1", "--mtu", "1500"]) == 2
    assert "--loss" in capsys.readouterr().err


def test_client_without_server_is_a_clear_error(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["rdma", "write-bw", "127.0.0.1", "--port", str(port), "--roce-port", "0"]) == 1
    assert "is 'testbed rdma server' running" in capsys.readouterr().err


def test_refusal_names_bind(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["rdma", "write-bw", "127.0.0.1", "--port", str(port), "--roce-port", "0"]) == 1
    err = capsys.readouterr().err
    assert "Connection refused" in err and "--bind" in err


@pytest.mark.parametrize("test,size,qps,transport", [
    ("read_bw", 100_001, 1, "rc"), ("read_bw", 5000, 3, "rc"), ("atomic_bw", 8, 3, "rc"),
    ("send_bw", 1000, 2, "ud"), ("write_bw", 20_000, 2, "uc"), ("send_bw", 3000, 1, "uc")])
def test_every_transport_and_test_verifies(server, test, size, qps, transport):
    lossy = transport == "rc"  # UC/UD lose messages for good: run them on a clean path
    cfg = QpConfig(mtu=1024, loss=0.02 if lossy else 0.0, seed=5, timeout=0.02)
    r = run_client("127.0.0.1", test, size, iters=30, port=server["port"], roce_port=0, config=cfg,
                   verify=True, tx_depth=4, qps=qps, transport=transport)
    assert r["iterations"] == 30 and r["verified"] is True, r
    assert r["qps"] == qps and len({q["qpn"] for q in r["qp_list"]}) == qps
    assert all(q["acked_bytes"] > 0 for q in r["qp_list"])  # the work was spread over every QP
    if lossy:
        assert r["retransmissions"] + r["read_retries"] > 0
    if test == "send_bw":
        assert r["server"]["received"] == 30
    if test == "atomic_bw":
        assert sum(r["server"]["counters"]) == 30 and min(r["server"]["counters"]) > 0
    assert "BW average[MB/sec]" in report_text(r)


def test_read_latency_is_a_round_trip(server):
    r = run_client("127.0.0.1", "read_lat", 64, iters=40, port=server["port"], roce_port=0, verify=True)
    assert r["iterations"] == 40 and r["verified"] and 0 < r["t_min_usec"] <= r["t_typical_usec"]
    assert "RDMA_Read Latency Test" in report_text(r)


def test_qps_send_from_their_own_source_ports(server):
    from testbed.rdma.wire import qp_source_port

    r = run_client("127.0.0.1", "write_bw", 4096, iters=8, port=server["port"], roce_port=0, qps=4)
    ports = [q["sport"] for q in r["qp_list"]]
    assert len(set(ports)) == 4
    # the rxe-derived port wherever it was free (the server's device shares this namespace)
    assert sum(p == qp_source_port(q["qpn"]) for p, q in zip(ports, r["qp_list"], strict=True)) >= 3


def test_bad_combinations_are_refused_before_connecting():
    from testbed.rdma.verbs import RdmaError

    with pytest.raises(RdmaError, match="runs over RC"):
        run_client("127.0.0.1", "read_bw", 10, transport="uc")
    with pytest.raises(RdmaError, match="one packet"):
        run_client("127.0.0.1", "send_bw", 5000, transport="ud")
    with pytest.raises(RdmaError, match="qps"):
        run_client("127.0.0.1", "write_bw", 10, qps=0)


def test_cli_read_bw_with_qps(server, capsys):
    rc = main(["rdma", "read-bw", "127.0.0.1", "--size", "8KB", "--iters", "12", "--qps", "3", "--port",
               str(server["port"]), "--roce-port", "0", "--verify", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["verified"] and doc["qps"] == 3 and doc["test"] == "read_bw"


def test_cli_refuses_a_transport_the_test_lacks(capsys):
    assert main(["rdma", "read-bw", "127.0.0.1", "-c", "UD"]) == 2
    assert "runs over RC" in capsys.readouterr().err
    assert main(["rdma", "send-bw", "127.0.0.1", "-c", "UD", "--size", "4KB"]) == 2


def test_the_control_plane_can_choose_both_qp_numbers(server):
    """Fast CNP with a preloaded QP map needs the numbers before the first packet (long_haul_cnp)."""
    r = run_client("127.0.0.1", "write_lat", 64, iters=5, port=server["port"], roce_port=0, qpns=(0x101, 0x201))
    assert r["local"]["qpn"] == 0x101 and r["remote"]["qpn"] == 0x201
    assert r["tx_packets"] >= 5 and r["server"]["stats"]["rx_packets"] >= 5


def test_a_taken_or_out_of_range_qp_number_is_refused():
    from testbed.errors import SpecError
    from testbed.rdma.device import Device
    from testbed.rdma.verbs import CompletionQueue

    with Device("127.0.0.1", 0, seed=1) as dev:
        pd, cq = dev.alloc_pd(), CompletionQueue()
        assert dev.create_qp(pd, cq, qpn=0x300).qpn == 0x300
        for bad in (0x300, 1, 1 << 24, True):
            with pytest.raises(SpecError, match="qpn"):
                dev.create_qp(pd, cq, qpn=bad)


def test_atomic_bw_compare_and_swap_verifies(server):
    """CAS k on a QP compares with k and swaps in k + 1: every one succeeds only if the responder executes
    them once each and in order, through 10 % loss (resent atomics answered from memory)."""
    cfg = QpConfig(mtu=1024, loss=0.1, seed=7, timeout=0.02)
    r = run_client("127.0.0.1", "atomic_bw", 8, iters=30, port=server["port"], roce_port=0, config=cfg,
                   verify=True, tx_depth=4, qps=3, atomic="cas")
    assert r["verified"] is True and r["atomic"] == "cas" and r["retransmissions"] > 0
    assert sum(r["server"]["counters"]) == 30 and min(r["server"]["counters"]) > 0   # spread to QPs with room
    assert "Atomic CMP_AND_SWAP BW Test" in report_text(r)


def test_cli_atomic_bw_takes_perftests_atomic_names(server, capsys):
    rc = main(["rdma", "atomic-bw", "127.0.0.1", "-A", "cmp_and_swap", "--iters", "12", "--port", str(server["port"]),
               "--roce-port", "0", "--verify", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["verified"] and doc["atomic"] == "cas" and doc["server"]["counters"] == [12]
    with pytest.raises(SystemExit) as exc:
        main(["rdma", "atomic-bw", "127.0.0.1", "-A", "SWAP"])
    assert exc.value.code == 2 and "CMP_AND_SWAP" in capsys.readouterr().err
