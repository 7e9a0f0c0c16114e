"""Which test-VM folders `testbed clean` and `make vm-test` may remove: only those whose owner is gone."""

from __future__ import annotations

import os
import subprocess
import sys

from testbed.emu.registry import process_start
from testbed.emu.vm import OWNER, TMP_PREFIX, UNOWNED_GRACE_S, remove_stale_dirs, stale_dirs


def _folder(root, name, owner=None, age=0.0):
    d = root / (TMP_PREFIX + name)
    (d / "a").mkdir(parents=True)
    if owner is not None:
        (d / OWNER).write_text(owner)
    if age:
        t = os.stat(d).st_mtime - age
        os.utime(d, (t, t))
    return d


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_folders_of_gone_owners_are_stale(tmp_path):
    me = os.getpid()
    live = _folder(tmp_path, "live", f"{me} {process_start(me)}\n")
    dead = _folder(tmp_path, "dead", f"{_dead_pid()} 1700000000.0\n")
    reused = _folder(tmp_path, "reused", f"{me} {process_start(me) - 1000}\n")   # our pid, another process
    young = _folder(tmp_path, "young")                                           # owner file not written yet
    old = _folder(tmp_path, "old", age=UNOWNED_GRACE_S + 5)
    (tmp_path / "other-dir").mkdir()
    found = dict(stale_dirs(tmp_path))
    assert set(found) == {dead, reused, old}
    assert "is gone" in found[dead] and "no owner recorded" in found[old]
    assert live.is_dir() and young.is_dir()


def test_remove_removes_only_the_stale_and_dry_run_nothing(tmp_path):
    me = os.getpid()
    live = _folder(tmp_path, "live", f"{me} {process_start(me)}\n")
    dead = _folder(tmp_path, "dead", f"{_dead_pid()} 1700000000.0\n")
    assert [d for d, _ in remove_stale_dirs(tmp_path, dry_run=True)] == [dead] and dead.is_dir()
    assert [d for d, _ in remove_stale_dirs(tmp_path)] == [dead]
    assert not dead.exists() and live.is_dir() and (tmp_path / (TMP_PREFIX + "live") / OWNER).is_file()
