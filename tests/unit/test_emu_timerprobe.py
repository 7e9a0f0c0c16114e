"""The machine's timer-stall probe (testbed.emu.timerprobe): its summary from synthetic wake-ups, its file
format, and the real probe -- it measures, says its policy, and never outlives its starter or its watch."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
from array import array
from pathlib import Path

import pytest

from testbed.emu import timerprobe as T
from testbed.poll import poll


def test_an_on_time_machine_has_nothing_stalled():
    lateness = [20 + (i * 7) % 40 for i in range(5000)]         # 20-59 us: an idle machine's SCHED_FIFO wake-ups
    s = T.summarise(lateness, 1e-3, policy="SCHED_FIFO 20", cpu_s=0.1)
    assert s["wakeups"] == s["deadlines"] == 5000 and s["wall_s"] == 5.0   # no deadline skipped
    assert s["stalled_fraction"] == 0.0 and s["stalls"] == 0
    assert s["lateness_us"] == {"p50": 39, "p99": 59, "max": 59}
    assert s["cpu_fraction"] == 0.02 and s["policy"] == "SCHED_FIFO 20" and s["tolerance_us"] == 250.0


def test_a_stall_counts_every_deadline_it_made_late_the_skipped_ones_too():
    lateness = [30] * 995 + [100_000] * 4 + [5_250]             # four 100 ms stalls and one of 5.25 ms
    s = T.summarise(lateness, 1e-3, policy="SCHED_FIFO 20")
    # each stall skipped lateness // period deadlines: 995 + 4 * 101 + 6 in all
    assert s["deadlines"] == 1405 and s["wall_s"] == pytest.approx(1.405)
    # late beyond 250 us: ceil((100000 - 250) / 1000) = 100 of each 100 ms stall's 101, 5 of the 5.25 ms one's 6
    assert s["stalled_fraction"] == pytest.approx((4 * 100 + 5) / 1405, abs=1e-5)
    assert s["stalled_fraction_beyond"]["5ms"] == pytest.approx((4 * 95 + 1) / 1405, abs=1e-5)
    assert s["stalls"] == 4 and s["lateness_us"]["max"] == 100_000 and s["lateness_us"]["p50"] == 30
    assert s["cpu_s"] is None and s["cpu_fraction"] is None


def test_a_machine_whose_every_timer_is_a_little_late_is_late_all_the_time():
    s = T.summarise([500] * 1000, 1e-3, policy="SCHED_FIFO 20")   # every timer 0.5 ms late, none skipped
    assert s["stalled_fraction"] == 1.0 and s["stalled_fraction_beyond"]["1ms"] == 0.0 and s["stalls"] == 0


def test_the_period_is_longer_in_a_tcg_guest(tmp_path):
    tcg, kvm = tmp_path / "tcg", tmp_path / "kvm"
    tcg.write_text("processor\t: 0\nmodel name\t: QEMU TCG CPU version 2.5+\nflags\t\t: fpu hypervisor\n")
    kvm.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu hypervisor\n")
    none = lambda: None   # noqa: E731 - no cpuid device
    assert T.machine_period(tcg, none) == T.TCG_PERIOD_S and T.machine_period(kvm, none) == T.PERIOD_S
    assert T.machine_period(tmp_path / "absent", none) == T.PERIOD_S
    assert T.TimerProbe(period_s=0.002).period_s == 0.002


def test_the_tolerance_is_the_link_nodes_and_the_bound_its_late_fraction():
    from testbed.emu.runhealth import MAX_STALLED_FRACTION
    from testbed.links.accounting import MAX_LATE_FRACTION
    from testbed.links.delayline import DEFAULT_LATE_TOLERANCE_S

    assert T.TOLERANCE_S == DEFAULT_LATE_TOLERANCE_S and MAX_STALLED_FRACTION == MAX_LATE_FRACTION


def test_no_wakeup_is_nothing_measured_not_zero():
    s = T.summarise([], 1e-3, policy="SCHED_OTHER")
    assert s["wakeups"] == 0 and s["stalled_fraction"] is None and s["lateness_us"]["p99"] is None


def test_parse_reads_the_header_and_samples_and_refuses_a_probe_that_never_started():
    data = struct.pack("<4sI", T.MAGIC, 20) + array("I", [5, 7, 100_000]).tobytes() + b"\x01\x02"  # a torn tail
    policy, samples = T.parse(data)
    assert policy == "SCHED_FIFO 20" and list(samples) == [5, 7, 100_000]
    assert T.parse(struct.pack("<4sI", T.MAGIC, 0))[0] == "SCHED_OTHER"
    assert T.parse(b"")[0] is None and T.parse(b"garbage!")[0] is None


def _wakeups(pid: int) -> int:
    """Voluntary context switches of ``pid``: one per sleep of the probe."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches"):
            return int(line.split()[1])
    return 0


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_probe_measures_says_its_policy_and_is_gone_after():
    with T.TimerProbe() as probe:
        pid = probe.pid
        poll(lambda: _wakeups(pid) >= 300, timeout=30, interval=0.05, what="300 wake-ups of the probe")
    s = probe.summary
    assert _gone(pid) and probe.proc is None
    assert s["wakeups"] >= 250                                  # written out on SIGTERM, not lost
    assert s["policy"] == ("SCHED_FIFO 20" if os.geteuid() == 0 else "SCHED_OTHER")
    assert 0 <= s["lateness_us"]["p50"] <= s["lateness_us"]["p99"] <= s["lateness_us"]["max"]
    assert s["cpu_fraction"] is not None and s["cpu_fraction"] < 0.25   # not itself the load


def test_the_probe_stops_on_an_exception_and_a_short_span_still_has_its_start():
    with pytest.raises(RuntimeError), T.TimerProbe() as probe:   # stopped at once: waits for the probe's start
        pid = probe.pid
        raise RuntimeError("the trial failed")
    assert _gone(pid) and "error" not in probe.summary and probe.summary["policy"]


def test_the_probe_dies_with_its_starter_even_after_kill_9(tmp_path):
    starter = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from testbed.emu.timerprobe import TimerProbe
        with TimerProbe() as p:
            print(p.pid, flush=True)
            while True:
                time.sleep(1)
    """)
    proc = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(proc.stdout.readline())
        poll(lambda: _wakeups(pid) >= 10, timeout=30, interval=0.05, what="the probe running")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    poll(lambda: _gone(pid), timeout=10, interval=0.05, what="the probe gone with its starter")


def test_cpu_watch_carries_the_probe_and_leaves_its_cpu_out():
    from testbed.emu.health import CpuWatch

    with CpuWatch([]) as cpu:
        pid = cpu.probe.pid
        assert pid in [p.pid for p in cpu.excluded]
        poll(lambda: len(cpu.machine) >= 2 and _wakeups(pid) >= 200, timeout=30, interval=0.1,
             what="two CPU samples and 200 wake-ups")
    timers = cpu.summary()["timers"]
    assert _gone(pid) and timers["wakeups"] >= 150 and timers["stalled_fraction"] is not None
