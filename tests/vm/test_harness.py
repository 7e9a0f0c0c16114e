"""The VM harness itself (testbed.emu.vm), on the host: a VM that cannot boot fails in one line naming its
console log, and so does one whose provisioning fails (with its exit status, last line and setup.log); Ctrl-C or SIGTERM while a VM boots leaves no QEMU, socket, temporary folder or held image
lock; after kill -9, QEMU dies too and `testbed clean` removes the folder; two VMs joined by a link reach each other, share files, and run rdma_rxe verbs traffic (the
pair RoCE tests build on)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.emu.vm import VMGroup, leftovers, stale_dirs
from testbed.emu.vmimage import Image, VMError
from testbed.poll import poll

REPO = Path(__file__).resolve().parents[2]


def _nothing_left():
    left = leftovers()
    assert left == {"qemu": [], "tmp": []}, left
    lock = open(Path("/var/cache/scaleout-testbed/vm/.lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)   # not held by anyone (raises if it were)
    lock.close()


def test_unbootable_vm_fails_in_one_line_naming_the_console(vm_image, tmp_path):
    bad = tmp_path / "bad-image"
    bad.mkdir()
    (bad / "vmlinuz").symlink_to(vm_image.kernel)
    root = tmp_path / "root"
    root.mkdir()
    (root / "init").write_text("#!/no/such/interpreter\n")
    os.chmod(root / "init", 0o755)
    with open(bad / "initrd.cpio", "wb") as f:
        subprocess.run("find . | cpio -o -H newc --quiet", shell=True, cwd=root, stdout=f, check=True)
    with pytest.raises(VMError) as err:
        with VMGroup(Image("bad", bad), tmp_path / "out", names=("broken",), memory_mb=1536, boot_timeout=300):
            pass
    msg = str(err.value)
    assert "\n" not in msg and "did not boot" in msg and "No working init" in msg
    console = Path(msg.rsplit("console log: ", 1)[1])
    assert console.is_file() and "Kernel panic" in console.read_text()
    _nothing_left()


def test_failed_provisioning_is_one_line_naming_setup_log_and_console(vm_image, tmp_path):
    with VMGroup(vm_image, tmp_path / "out", names=("prov",)) as vms:
        (vms.share / "provision.sh").write_text("echo installing things\necho 'E: Unable to locate package nope'\n"
                                               "exit 3\n")
        with pytest.raises(VMError) as err:
            vms["prov"].provision("bash /mnt/share/provision.sh", timeout=120)
        console = vms["prov"].console_log
    msg = str(err.value)
    assert "\n" not in msg and "provisioning" in msg and "exited 3" in msg, msg
    assert "E: Unable to locate package nope" in msg, msg     # the last line of its output
    setup_log = Path(msg.split("setup.log: ", 1)[1].split(";", 1)[0])
    assert setup_log.read_text().splitlines() == ["installing things", "E: Unable to locate package nope"]
    assert msg.endswith(f"console log: {console})") and console.is_file() and console.stat().st_size > 0
    _nothing_left()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_signal_while_booting_leaves_nothing_behind(vm_image, tmp_path, sig):
    # A child inherits an ignored SIGINT (a suite started in the background of a non-interactive shell, as
    # `cmd &` does) and Python then leaves it ignored: give it Ctrl-C's default, as a terminal's job has.
    script = textwrap.dedent(f"""
        import signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from pathlib import Path
        from testbed.emu.vm import VMGroup
        from testbed.emu.vmimage import Image
        img = Image({vm_image.key!r}, Path({str(vm_image.dir)!r}))
        try:
            with VMGroup(img, Path({str(tmp_path / "out")!r}), names=("a", "b"), links=[("a", "b")]):
                pass
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(130)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        poll(lambda: len(leftovers()["qemu"]) == 2 or proc.poll() is not None, timeout=60, interval=0.1,
             what="both QEMUs to start")
        assert proc.poll() is None
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "interrupted" in out
    _nothing_left()


def test_kill_9_takes_qemu_down_and_testbed_clean_removes_the_folder(vm_image, tmp_path):
    """SIGKILL cannot be cleaned up after: QEMU dies with its parent (PDEATHSIG) and the folder, which names
    its dead owner, is what `testbed clean` removes; a live group's folder is never touched."""
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from testbed.emu.vm import VMGroup
        from testbed.emu.vmimage import Image
        img = Image({vm_image.key!r}, Path({str(vm_image.dir)!r}))
        with VMGroup(img, Path({str(tmp_path / "out")!r}), names=("a",)):
            time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    try:
        poll(lambda: len(leftovers()["qemu"]) == 1 or proc.poll() is not None, timeout=60, interval=0.1,
             what="QEMU to start")
        assert proc.poll() is None
        folder = leftovers()["tmp"]
        assert len(folder) == 1 and not stale_dirs()           # its owner lives: not stale
        proc.kill()
        proc.wait()
        poll(lambda: not leftovers()["qemu"], timeout=30, interval=0.1, what="QEMU to die with its parent")
        assert leftovers()["tmp"] == folder
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rc = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], cwd=REPO, capture_output=True, text=True)
    assert rc.returncode == 0 and f"removed VM folder {folder[0]}" in rc.stdout, rc.stdout + rc.stderr
    _nothing_left()


def test_two_vms_joined_by_a_link_share_files_and_run_rxe_verbs(vm_image, vm_out):
    with VMGroup(vm_image, vm_out / "pair", names=("a", "b"), links=[("a", "b")]) as vms:
        for name, ip in (("a", "10.90.0.1"), ("b", "10.90.0.2")):
            dev = vms.ifname(name, "b" if name == "a" else "a")
            vms[name].run(f"ip addr add {ip}/24 dev {dev} && ip link set {dev} up && "
                          f"rdma link add rxe0 type rxe netdev {dev}")
        vms["a"].run("ping -c 3 -W 5 10.90.0.2")
        (vms.share / "hello.txt").write_text("from the host\n")
        assert vms["b"].run("cat /mnt/share/hello.txt").output == "from the host\n"
        server = vms["b"].spawn("ibv_rc_pingpong -d rxe0 -g 1 -n 200")
        poll(lambda: vms["b"].run("ss -Hltn 'sport = :18515'", check=False).output.strip(), timeout=120,
             interval=0.5, what="ibv_rc_pingpong server to listen")
        client = vms["a"].run("ibv_rc_pingpong -d rxe0 -g 1 -n 200 10.90.0.2", timeout=300)
        srv = server.wait(120)
        assert "200 iters" in client.output and "200 iters" in srv.output, client.output + srv.output
    _nothing_left()
