"""LogTail: a run's results get the ovs-vswitchd.log lines written while it ran, and only those."""

from __future__ import annotations

from testbed.emu.ovslog import LogTail


def test_only_what_was_appended_is_saved(tmp_path):
    log, dest = tmp_path / "ovs-vswitchd.log", tmp_path / "out.log"
    log.write_text("before 1\nbefore 2\n")
    tail = LogTail(log)
    with open(log, "a") as f:
        f.write("during 1\nduring 2\n")
    assert tail.save(dest) == len("during 1\nduring 2\n")
    assert dest.read_text() == "during 1\nduring 2\n"


def test_nothing_appended_or_no_log_writes_nothing(tmp_path):
    log, dest = tmp_path / "ovs-vswitchd.log", tmp_path / "out.log"
    log.write_text("old\n")
    assert LogTail(log).save(dest) == 0 and not dest.exists()
    assert LogTail(tmp_path / "missing.log").save(dest) == 0 and not dest.exists()


def test_rotation_copies_the_new_file_and_a_long_run_keeps_whole_last_lines(tmp_path):
    log, dest = tmp_path / "ovs-vswitchd.log", tmp_path / "out.log"
    log.write_text("x" * 1000 + "\n")
    tail = LogTail(log)
    log.write_text("after rotation\n")                   # logrotate: a new, shorter file
    assert tail.save(dest) > 0 and dest.read_text() == "after rotation\n"
    log.write_text("")
    tail = LogTail(log)
    log.write_text("".join(f"line {i:04d}\n" for i in range(100)))   # 10 bytes a line
    tail.save(dest, max_bytes=55)                                    # cut mid-line: whole lines kept
    assert dest.read_text() == "".join(f"line {i:04d}\n" for i in range(95, 100))


def test_a_rotated_log_longer_than_the_cap_is_also_cut_to_whole_lines(tmp_path):
    log, dest = tmp_path / "ovs-vswitchd.log", tmp_path / "out.log"
    log.write_text("x" * 5000 + "\n")
    tail = LogTail(log)
    log.write_text("".join(f"line {i:04d}\n" for i in range(100)))   # rotated, 1000 bytes < 5001 at start
    tail.save(dest, max_bytes=55)
    assert dest.read_text() == "".join(f"line {i:04d}\n" for i in range(95, 100))
