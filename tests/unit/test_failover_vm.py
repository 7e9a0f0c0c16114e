"""make failover-vm's table: userspace and kernel datapath figures side by side, with their ratio."""

from __future__ import annotations

from testbed.bench.failover_vm import command, table


def test_table_puts_both_datapaths_and_their_ratio_on_one_row():
    docs = {"user": {"controller_outage_ms_median": 40.0, "controller_outage_ms_p95": 80.0,
                     "fast_failover_outage_ms_median": 30.0, "fast_failover_outage_ms_p95": 50.0,
                     "fast_failover_port_status_ms_median": 25.0},
            "kernel": {"controller_outage_ms_median": 20.0, "controller_outage_ms_p95": 60.0,
                       "fast_failover_outage_ms_median": 3.0, "fast_failover_outage_ms_p95": 5.0,
                       "fast_failover_port_status_ms_median": 24.0}}
    rows = table(docs, ["head"]).splitlines()
    assert rows[0] == "head"
    assert "| fast-failover outage, median | 30.0 ms | 3.0 ms | 0.10 |" in rows
    assert "| controller reroute outage, p95 | 80.0 ms | 60.0 ms | 0.75 |" in rows
    assert "| port status at the controller (fast failover), median | 25.0 ms | 24.0 ms | 0.96 |" in rows
    assert not any("port status" in r and "p95" in r for r in rows)    # only its median is recorded


def test_a_datapath_that_did_not_run_shows_dashes_and_no_ratio():
    rows = table({"user": {"controller_outage_ms_median": 40.0}}, []).splitlines()
    assert "| controller reroute outage, median | 40.0 ms | - | - |" in rows


def test_each_run_asks_for_its_datapath_and_writes_its_own_folder():
    for dp in ("user", "kernel"):
        c = command(dp, 7)
        assert f"--datapath {dp}" in c and f"/mnt/out/failover-{dp} " in c and "--repetitions 7" in c
