"""The one tcpdump wrapper: enter only once it listens, fail in one line when it exits, stop it after."""

import subprocess
import sys

import pytest

from testbed.emu.capture import tcpdump, tcpdump_argv
from testbed.errors import EmulationError


def test_argv_writes_each_frame_at_once_with_the_filter_last(tmp_path):
    argv = tcpdump_argv("eth0", tmp_path / "x.pcap", ["udp", "port", "4791"], snaplen=96, nano=True)
    assert argv[:3] == ["tcpdump", "-i", "eth0"] and "-U" in argv
    assert argv[argv.index("-s") + 1] == "96" and argv[argv.index("-w") + 1] == str(tmp_path / "x.pcap")
    assert argv[-3:] == ["udp", "port", "4791"] and "nano" in argv
    assert "nano" not in tcpdump_argv("eth0", tmp_path / "x.pcap", ["arp"])
    assert "-c" not in tcpdump_argv("eth0", tmp_path / "x.pcap", ["arp"])
    bounded = tcpdump_argv("eth0", tmp_path / "x.pcap", ["arp"], count=1500)
    assert bounded[bounded.index("-c") + 1] == "1500" and bounded[-1] == "arp"


def _fake(script: str):
    """A spawn running ``script`` (Python) as the 'tcpdump', its output into the log as tcpdump's is."""
    def spawn(argv, log):
        with open(log, "w") as f:
            return subprocess.Popen([sys.executable, "-c", script, *argv], stdout=f, stderr=subprocess.STDOUT)
    return spawn


LISTENS = ("import sys, time, pathlib; p = pathlib.Path(sys.argv[sys.argv.index('-w') + 1]); "
           "p.write_bytes(b'x' * 24); print('listening on eth0', flush=True); time.sleep(60)")


def test_enters_once_listening_and_stops_the_process_after(tmp_path):
    argv = tcpdump_argv("eth0", tmp_path / "x.pcap", ["arp"])
    with tcpdump(_fake(LISTENS), argv, tmp_path / "t.log", "eth0") as proc:
        assert "listening on" in (tmp_path / "t.log").read_text()
        assert proc.poll() is None
    assert proc.poll() is not None   # SIGINT on leaving: nothing left running


def test_a_tcpdump_that_exits_is_one_line_naming_its_log(tmp_path):
    argv = tcpdump_argv("nosuch0", tmp_path / "x.pcap", ["arp"])
    dies = "print('tcpdump: nosuch0: No such device exists'); raise SystemExit(1)"
    with pytest.raises(EmulationError, match=r"tcpdump on nosuch0 exited with status 1: .*No such device.*t\.log"):
        with tcpdump(_fake(dies), argv, tmp_path / "t.log", "nosuch0"):
            pytest.fail("entered a capture that never listened")


def test_an_error_in_the_block_still_stops_it(tmp_path):
    argv = tcpdump_argv("eth0", tmp_path / "x.pcap", ["arp"])
    with pytest.raises(RuntimeError), tcpdump(_fake(LISTENS), argv, tmp_path / "t.log", "eth0") as proc:
        raise RuntimeError("the trial failed")
    assert proc.poll() is not None


def test_a_bounded_capture_done_before_the_block_is_no_error(tmp_path):
    # tcpdump -c N exits 0 once it has N frames; that may happen before the caller looks
    done = ("import sys, pathlib; p = pathlib.Path(sys.argv[sys.argv.index('-w') + 1]); "
            "p.write_bytes(b'x' * 24); print('listening on eth0', flush=True); print('3 packets captured')")
    argv = tcpdump_argv("eth0", tmp_path / "x.pcap", ["arp"], count=3)
    with tcpdump(_fake(done), argv, tmp_path / "t.log", "eth0") as proc:
        proc.wait(timeout=10)
    assert proc.returncode == 0 and (tmp_path / "x.pcap").stat().st_size == 24
