"""The kernel wire's frame ledger from tc counters, and the side-by-side table of ``testbed bench link``
(pure parts of testbed/links/kwire.py and testbed/bench/link_table.py)."""

from __future__ import annotations

from testbed.bench.link import cases
from testbed.bench.link_table import markdown, rows
from testbed.links.kwire import ledger


def test_ledger_attributes_drops_to_the_qdisc_that_made_them():
    # tc -s -j: a parent counts its children's drops again (7 RED + 3 tail in tbf; + 5 netem loss at the root)
    q = {"netem": {"packets": 985, "drops": 15, "qlen": 0},
         "tbf": {"packets": 985, "drops": 10, "overlimits": 400},
         "red": {"packets": 985, "drops": 7, "early": 6, "pdrop": 1, "marked": 120}}
    got = ledger(q)
    assert (got["drop_loss"], got["drop_tail"], got["drop_red"], got["ce_marked"]) == (5, 3, 7, 120)
    assert got["tx_packets"] == 985


def test_ledger_calls_netems_own_drops_tail_on_a_link_without_random_loss():
    # netem's limit (the link's queue) counts the frames in tbf/RED below it: a backlog hits it first
    q = {"netem": {"packets": 2338, "drops": 162}, "tbf": {"packets": 2338, "drops": 0},
         "red": {"packets": 2338, "drops": 0, "early": 0, "pdrop": 0, "marked": 1930}}
    got = ledger(q, random_loss=False)
    assert (got["drop_loss"], got["drop_tail"], got["ce_marked"]) == (0, 162, 1930)


def test_ledger_of_netem_alone_is_all_loss_and_of_htb_alone_all_tail():
    assert ledger({"netem": {"packets": 99, "drops": 1}})["drop_loss"] == 1
    htb = ledger({"htb": {"packets": 50, "drops": 4}})
    assert (htb["drop_tail"], htb["drop_loss"], htb["tx_packets"]) == (4, 0, 50)


def test_slow_cpu_profile_stays_within_what_a_tcg_guest_sends():
    for quick in (True, False):
        plan = cases(quick, slow_cpu=True)
        # probe rates a Python sender in a TCG guest sustains (~700/s), bottlenecks iperf3 there fills
        assert plan["probe_pps"] <= 700 and plan["loss_pps"] <= 700
        assert 1.1 * plan["red_rate_bps"] / (1514 * 8) <= 700
        assert max(plan["rates_bps"]) <= 10e6 and not plan["pps_steps"]
    assert cases(True)["rates_bps"] == (10e6, 200e6)   # the host profile is unchanged


def _report():
    delay = {"delay_ms": 1.0, "ideal_ms": 2.2112, "median_ms": 2.3, "p99_error_pct": 9.5, "samples": 299, "sent": 300}
    gap = {"rate_mbps": 2.0, "ideal_gap_us": 6056.0, "median_gap_us": 6050.0, "p50_error_pct": 0.1,
           "p99_error_pct": 4.0}
    loss = {"configured_pct": 1.0, "sent": 3000, "lost": 33, "loss_pct": 1.1, "z": 0.55, "unattributed": 0}
    red = {"kmin": 10, "kmax": 50, "pmax": 0.5, "rate_mbps": 4.0, "bins": [{"abs_error": 0.08}], "ce": 700,
           "lost": 12, "sent": 1200}
    return {"cores": {"c": {"delay_cases": [delay], "gap_cases": [gap], "loss": loss, "red": red},
                      "netem": {"delay_cases": [{**delay, "median_ms": 1.05}], "gap_cases": [gap], "loss": loss,
                                "red": {**red, "bins": []}}},
            "loaded": {"netem": {"delay_cases": [delay]}, "load": "2 busy loops"},
            "machine": {"cpus": 2, "kernel": "6.1.0-57-amd64", "vendor": "QEMU", "host": "2 cores, load 1.5"},
            "uptime": "up 1 min, load average: 1.00", "profile": "slow-cpu", "quick": False}


def test_table_has_one_column_per_backend_and_one_row_per_case():
    header, body = rows(_report())
    assert header == ["case", "userspace, C core", "kernel tc (netem/tbf/red)"]
    labels = [r[0] for r in body]
    assert labels[0] == "one-way delay 1 ms (ideal 2.2112 ms)"
    assert any(lb.startswith("random loss 1 %") for lb in labels)
    assert any(lb.endswith("with a CPU hog per core") for lb in labels)
    first = body[0]
    assert "median 2.3 ms" in first[1] and "median 1.05 ms" in first[2]
    red = next(r for r in body if r[0].startswith("RED"))
    assert "0.08 over 1 bins" in red[1] and "- over 0 bins" in red[2]   # no bin: no figure, not a zero
    loaded = next(r for r in body if r[0].endswith("per core"))
    assert loaded[1] == "" and loaded[2]


def test_markdown_names_the_machine_and_is_a_table():
    text = markdown(_report())
    assert "a QEMU guest: 2 CPUs" in text and "Host: 2 cores, load 1.5." in text
    table = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert len({ln.count("|") for ln in table}) == 1   # every row has the header's columns
