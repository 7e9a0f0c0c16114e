"""jobs.png's series: which fabric links each job used alone, and which two jobs shared (an ECMP collision)."""

import pytest

from testbed.collective import jobsfig
from testbed.errors import SpecError

HOSTS = {"h0", "h1", "h2", "h3"}


def links(**moved):
    """link_usage-shaped rows from ``t0__a0=bytes`` (``__`` for ``->``)."""
    return [{"link": k.replace("__", "->"), "bytes": b, "utilisation": 0.0} for k, b in moved.items()]


def test_disjoint_jobs_share_no_link_and_host_links_are_left_out():
    a = links(h0__t0=9_000_000, t0__a0=1_000_000, a0__t0=1_000_000)
    b = links(h2__t2=9_000_000, t2__a2=2_000_000, a2__t2=2_000_000)
    rows = jobsfig.link_rows({"A": a, "B": b}, a + b, HOSTS)
    assert {r["link"] for r in rows} == {"t0->a0", "a0->t0", "t2->a2", "a2->t2"}
    assert jobsfig.shared_links(rows) == []
    assert rows[0]["together_bytes"] == 2_000_000 and rows[0]["users"] == ["B"]
    assert rows[0]["alone_bytes"] == {"A": 0, "B": 2_000_000}


def test_a_link_both_jobs_used_alone_is_shared():
    a = links(t0__a0=1_000_000, a0__c0=800_000)
    b = links(t2__a2=1_000_000, a2__c0=900_000, c0__a0=700_000)
    a_on_c = a + links(c0__a0=600_000)
    rows = jobsfig.link_rows({"A": a_on_c, "B": b}, a_on_c + b, HOSTS)
    assert jobsfig.shared_links(rows) == ["c0->a0"]
    shared = next(r for r in rows if r["shared"])
    assert shared["users"] == ["A", "B"] and shared["alone_bytes"] == {"A": 600_000, "B": 700_000}


def test_control_traffic_below_the_share_is_no_use():
    """LLDP/ARP bytes on a link the other job really used: below MIN_SHARE of its busiest link, no collision."""
    noise = int(jobsfig.MIN_SHARE * 1_000_000) - 1
    a = links(t0__a0=1_000_000, c0__a2=noise)
    b = links(t2__a2=1_000_000, c0__a2=500_000)
    rows = jobsfig.link_rows({"A": a, "B": b}, a + b, HOSTS)
    assert jobsfig.shared_links(rows) == []
    assert next(r for r in rows if r["link"] == "c0->a2")["users"] == ["B"]


def test_one_job_is_refused():
    with pytest.raises(SpecError, match="two or more"):
        jobsfig.link_rows({"A": links(t0__a0=1)}, links(t0__a0=1), HOSTS)


def test_plot_writes_a_png(tmp_path):
    a = links(t0__a0=1_000_000, c0__a0=600_000)
    b = links(t2__a2=1_000_000, c0__a0=700_000)
    rows = jobsfig.link_rows({"A": a, "B": b}, a + b, HOSTS)
    path = tmp_path / "jobs.png"
    jobsfig.plot({"A": 1.0, "B": 1.1}, {"A": 1.05, "B": 1.2}, rows, path, title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_link_carrying_two_jobs_together_is_above_though_each_used_another_alone():
    """ECMP draws again in every run: alone each job crossed its own core link, together both crossed c0."""
    a = links(t0__a0=1_000_000, a0__c0=1_000_000)
    b = links(t2__a2=1_000_000, a2__c1=1_000_000)
    together = links(t0__a0=1_000_000, t2__a2=1_000_000, a0__c0=1_000_000, a2__c0=1_000_000, c0__a1=2_000_000)
    rows = jobsfig.link_rows({"A": a, "B": b}, together, HOSTS)
    assert jobsfig.shared_links(rows) == []
    assert jobsfig.above_links(rows) == ["c0->a1"]
    assert rows[0]["link"] == "c0->a1" and rows[0]["users"] == []
    assert "a2->c1" in {r["link"] for r in rows}        # used alone, idle together: still drawn


def test_a_trickle_together_on_a_link_no_job_used_is_left_out():
    a = links(t0__a0=1_000_000)
    b = links(t2__a2=1_000_000)
    together = a + b + links(a0__t1=int(jobsfig.MIN_SHARE * 1_000_000) - 1)
    assert "a0->t1" not in {r["link"] for r in jobsfig.link_rows({"A": a, "B": b}, together, HOSTS)}


def test_the_scenarios_two_jobs_part_reports_slowdowns_and_draws_jobs_png(tmp_path):
    """scenarios/collective.py's two-jobs part with a stand-in fabric (the part takes its fabric class):
    alone then together, the summary's slowdowns and link verdicts, and jobs.png in the part's folder."""
    from scenarios.collective import two_jobs
    from testbed.collective import experiment as X
    from testbed.collective import placement as P

    runs = []

    class Fabric:
        scale = 10000.0

        def __init__(self, G, rate, out, send_buffer=None):
            self.out = out

        def __enter__(self):
            self.out.mkdir(parents=True, exist_ok=True)
            return self

        def __exit__(self, *exc):
            return False

        def warm(self, hosts):
            pass

        def run(self, jobs, tag):
            runs.append(tag)
            jct = {"alone-job1": [2.0], "alone-job2": [3.0], "together": [2.2, 3.0]}[tag]
            core = {"a0->cr0": 10**6} if tag != "alone-job2" else {"a2->cr0": 10**6}
            if tag == "together":
                core = {"a0->cr0": 10**6, "a2->cr0": 10**6, "cr0->a1": 2 * 10**6}
            return {"jobs": [{"name": j.name, "jct_s": t, "real_jct_ms": t / 10, "hosts": list(j.hosts), "rows": []}
                             for j, t in zip(jobs, jct, strict=True)],
                    "links": [{"link": k, "bytes": b, "utilisation": 0.5} for k, b in core.items()],
                    "health": {"ok": True, "reasons": [], "cpu": {}, "load": [0, 0, 0]}}

    class JobRun:
        def __init__(self, name, hosts, **kw):
            self.name, self.hosts = name, hosts

    part = two_jobs(10e6, tmp_path / "fat-tree", X, P, Fabric, JobRun, quiet=True)
    assert runs == ["alone-job1", "alone-job2", "together"]
    s = part["summary"]
    assert s["slowdown"] == [1.1, 1.0] and s["above_links"] == ["cr0->a1"] and s["shared_links"] == []
    assert (tmp_path / "fat-tree" / "jobs.png").read_bytes()[:4] == b"\x89PNG"
