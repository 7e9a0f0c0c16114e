"""``--ovs-send-buffer`` (testbed.emu.ovssndbuf): ovs-vswitchd's one AF_PACKET send socket raised for a run
and put back on every way out.

* A stand-in process holding an unbound packet socket (protocol 0: the send socket's shape) and one bound
  to ``lo`` (a port socket's): :class:`Raised` finds the unbound one, raises it, restores it on exit; on
  SIGTERM through the CLI's handling (exit 143, restored); after SIGKILL (left raised, with its owner
  record) by ``testbed clean``; and when the process is gone meanwhile (an ovs-vswitchd restart) it says
  so instead of raising.
* Live: the acceptance's 8-rank all-to-all (256 KiB, ranks spread over fat-tree-k4's ToRs), first without
  the option (OVS's send socket loses frames at its default buffer), then with 4 MiB: 0 of the ranks' frames lost in the send socket, the
  buffer was 4 MiB during the run (read by ``ss -m`` at the run's end, not by the lever) and is back to
  its value before afterwards (read through pidfd_getfd and by ss).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.emu import ovssndbuf as S
from testbed.emu.registry import state_dir
from testbed.poll import poll

pytestmark = [pytest.mark.root]

REPO = str(Path(__file__).resolve().parents[2])

HOLDER = textwrap.dedent("""
    import socket, sys, time
    send = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    port = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    port.bind(("lo", 3))
    print(send.fileno(), flush=True)
    time.sleep(120)
""")


@pytest.fixture
def holder():
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    fd = int(proc.stdout.readline())
    yield proc, fd
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_raised_then_restored_on_the_unbound_socket(holder):
    proc, fd = holder
    before = S.read(proc.pid)
    with S.Raised(4 << 20, pid=proc.pid) as lever:
        assert S.read(proc.pid) == 4 << 20
        assert lever.record["fd"] == fd, "took a socket other than the unbound one"
    assert S.read(proc.pid) == before and lever.record["after"] == before and lever.record["restored"] is True
    with pytest.raises(S.NoSendSocket, match="no send socket"):      # this test process has none
        S.Raised(1 << 20, pid=os.getpid()).__enter__()


def test_sigterm_through_the_cli_restores_it(holder, tmp_path):
    proc, _ = holder
    before = S.read(proc.pid)
    flag = tmp_path / "raised"
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from testbed.cli import run_guarded
        from testbed.emu.ovssndbuf import Raised

        def job():
            with Raised(8 << 20, pid={proc.pid}):
                Path({str(flag)!r}).write_text("x")
                time.sleep(60)
        sys.exit(run_guarded(job))
    """)
    run = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        poll(flag.exists, timeout=20, interval=0.05, what="the lever raised in the child")
        assert S.read(proc.pid) == 8 << 20
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=20) == 128 + signal.SIGTERM, run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
    assert S.read(proc.pid) == before


def test_a_killed_run_is_put_back_by_testbed_clean(holder, tmp_path):
    proc, _ = holder
    before = S.read(proc.pid)
    code = textwrap.dedent(f"""
        import time
        from testbed.emu.ovssndbuf import Raised
        Raised(8 << 20, pid={proc.pid}).__enter__()
        print("up", flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout.readline().strip() == "up"
        saved = json.loads((state_dir() / S.SAVED).read_text())
        assert (saved["pid"], saved["ovs_pid"], saved["before"]) == (child.pid, proc.pid, before)
    finally:
        child.kill()
        child.wait()
    assert S.read(proc.pid) == 8 << 20, "SIGKILL leaves it raised"
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], capture_output=True, text=True, timeout=120,
                         cwd=REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    assert S.read(proc.pid) == before
    assert not (state_dir() / S.SAVED).exists()


def test_a_restart_during_the_run_is_said_not_raised(holder):
    proc, _ = holder
    with S.Raised(2 << 20, pid=proc.pid) as lever:
        proc.kill()
        proc.wait()
    rec = lever.record
    assert rec["restored"] is None and rec["after"] is None and "restarted during the run" in rec["note"]
    assert "restarted during the run" in S.line(rec)


@pytest.mark.mininet
@pytest.mark.ovs
def test_all_to_all_loses_nothing_in_the_send_socket_with_the_option(tmp_path):
    from testbed.collective.experiment import fabric_graph
    from testbed.collective.placement import place
    from testbed.collective.runner import CollectiveFabric, JobRun
    from testbed.emu.health import ovs_pid, ss_packet_sockets
    from testbed.emu.ovsloss import send_socket

    G = fabric_graph("fat-tree-k4")     # a learning bridge's floods (the small fabric) blur the inference
    hosts = tuple(place(G, 8, "spread"))
    a2a = ({"collective": "all_to_all", "bytes": 256 << 10, "chunks": 2},)

    def in_send_socket(result):
        led = result["health"]["losses"]
        return led["emulator"]["ovs_send_socket"] - led["others_lost"]      # the ranks' frames lost there

    with CollectiveFabric(G, 10e6, tmp_path) as fab:
        fab.warm(hosts)
        pid = ovs_pid()
        before = S.read(pid)
        without = fab.run([JobRun("a2a", hosts, runs=a2a, iters=1, warmup=0)], "without", timeout=120)
        assert without["health"]["ovs_send_buffer_raised"] == "not applied"
        fab.send_buffer = 4 << 20
        raised = fab.run([JobRun("a2a", hosts, runs=a2a, iters=1, warmup=0)], "with", timeout=120)
        after, after_ss = S.read(pid), send_socket(ss_packet_sockets(), pid)
    print(f"send socket lost {in_send_socket(without)} frames at {before} B, {in_send_socket(raised)} at 4 MiB; "
          f"JCT {without['jobs'][0]['jct_s']:.2f} s -> {raised['jobs'][0]['jct_s']:.2f} s")
    assert without["jobs"][0]["rows"][0]["wrong"] == 0 and raised["jobs"][0]["rows"][0]["wrong"] == 0
    assert in_send_socket(without) > 0, "at the default buffer the all-to-all lost nothing: the lever shows nothing"
    assert in_send_socket(raised) <= 0, raised["health"]["losses"]
    rec = raised["health"]["ovs_send_buffer_raised"]
    assert rec["before"] == before and rec["during"] == 4 << 20 and rec["restored"] is True, rec
    assert raised["health"]["losses"]["ovs_send_buffer"]["sndbuf"] == 4 << 20     # ss, at the run's end
    assert after == before and after_ss["sndbuf"] == before
