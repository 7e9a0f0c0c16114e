"""Test VMs (root glue): boot the cached image under QEMU, run commands inside, share files, join VMs.

The reusable API (helper tests, ``make vm-test``, RoCE peers in two VMs)::

    from testbed.emu.vm import VMGroup
    from testbed.emu.vmimage import ensure_image

    image = ensure_image()                                    # cached by recipe key (testbed.vm.recipe)
    with VMGroup(image, out_dir, names=("a", "b"), links=[("a", "b")]) as vms:
        a, b = vms["a"], vms["b"]
        a.run(f"ip addr add 10.0.0.1/24 dev {vms.ifname('a', 'b')}; ip link set eth0 up")
        server = b.spawn("ib_write_bw -d rxe0")               # runs in the background
        a.run("ib_write_bw -d rxe0 10.0.0.2", timeout=120)    # JobResult(rc, output); raises on rc != 0
        server.wait(60)
        (vms.share / "x.bin").write_bytes(...)                # every VM sees it as /mnt/share/x.bin

    a ---- eth0 ===== unix stream socket (-netdev stream) ===== eth0 ---- b

Each VM exports, with 9p: the checkout read-only at ``/testbed``, a job spool at ``/mnt/ctl``, its results
folder ``out_dir/<name>`` at ``/mnt/out`` and the group's shared folder at ``/mnt/share``. Its serial
console goes to ``out_dir/<name>-console.log``. The guest has no network but the links given here.

Faults: a VM that does not boot raises :class:`VMError` with one line naming the console log. Whatever
happens (success, an exception, Ctrl-C, SIGTERM), leaving the ``with`` block stops every QEMU it started
and removes its sockets and temporary folder; a ``kill -9`` of the Python process still takes QEMU down
(``PR_SET_PDEATHSIG``), leaving only the temporary folder under ``/tmp/scaleout-vm-*``. That folder names
its owner (pid and start time, in ``owner``), so ``testbed clean`` and ``make vm-test`` remove the folders
of dead owners and never a live group's.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.emu.registry import process_start, same_process
from testbed.emu.signals import deferred_signals, terminate_raises
from testbed.emu.vmimage import VMError, choose_accel
from testbed.poll import poll
from testbed.vm import recipe

REPO = Path(__file__).resolve().parents[2]
TMP_PREFIX = "scaleout-vm-"
OWNER = "owner"            # "<pid> <start time>" of the Python process whose VMGroup made the folder
UNOWNED_GRACE_S = 60.0     # a folder without an owner file younger than this may be one being made
GUEST_SHARE = "/mnt/share"
DEFAULT_BOOT_TIMEOUT = 300.0   # TCG on a loaded 2-core machine: ~20 s idle, minutes when contended
NICE = 10


def _child_setup() -> None:  # pragma: no cover - runs in the forked child
    """QEMU dies with its parent (even on kill -9) and yields the CPU to interactive work."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    os.setpgrp()   # Ctrl-C in a terminal reaches Python, which stops QEMU in order
    os.nice(NICE)


@dataclass(frozen=True)
class JobResult:
    rc: int
    output: str


class Job:
    """A command running in a guest; :meth:`wait` returns its :class:`JobResult`."""

    def __init__(self, vm: VM, base: Path, command: str):
        self.vm, self.base, self.command = vm, base, command

    def done(self) -> bool:
        return self.base.with_suffix(".rc").exists()

    def wait(self, timeout: float, check: bool = True) -> JobResult:
        """Raises:
            VMError: timeout, the VM died, or (``check``) a non-zero exit, with the output's path."""
        # poll() treats exceptions as "not yet": the condition reports a dead VM as a value instead.
        def finished():
            return self.done() or not self.vm.alive()

        try:
            poll(finished, timeout=timeout, interval=0.2, what=f"`{self.command}` in vm {self.vm.name}")
        except TimeoutError:
            raise VMError(f"vm {self.vm.name}: `{_short(self.command)}` did not finish within {timeout:.0f} s; "
                          f"output so far: {self.base.with_suffix('.out')}") from None
        if not self.done():
            self.vm.check_alive()
        rc = int(self.base.with_suffix(".rc").read_text().strip() or 255)
        output = self.base.with_suffix(".out").read_text(errors="replace")
        if check and rc != 0:
            raise VMError(f"vm {self.vm.name}: `{_short(self.command)}` exited {rc}: "
                          f"{_last_line(output)} (output: {self.base.with_suffix('.out')})")
        return JobResult(rc, output)


class VM:
    """One QEMU guest (use it through :class:`VMGroup`)."""

    def __init__(self, cfg: recipe.VMConfig, ctl: Path, out: Path):
        self.cfg, self.ctl, self.out = cfg, ctl, out
        self.name = cfg.name
        self.proc: subprocess.Popen | None = None
        self._jobs = itertools.count(1)
        (ctl / "jobs").mkdir(parents=True, exist_ok=True)

    @property
    def console_log(self) -> Path:
        return self.cfg.console_log

    def start(self) -> None:
        argv = recipe.qemu_argv(self.cfg)
        (self.out / "qemu-argv.txt").write_text(" ".join(argv) + "\n")
        log = open(self.out / "qemu.log", "wb")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_child_setup)
        except FileNotFoundError:
            raise VMError("qemu-system-x86_64 not found (apt-get install qemu-system-x86; make vm-test "
                          "installs it)") from None
        finally:
            log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            rc = None if self.proc is None else self.proc.returncode
            raise VMError(f"vm {self.name} stopped (qemu exit {rc}; {_last_line(self._qemu_log())}); "
                          f"console log: {self.console_log}")

    def booted(self) -> bool:
        return (self.ctl / "ready").exists()

    def wait_ready(self, timeout: float) -> str:
        """Wait for the guest agent; returns the guest's kernel release.

        Raises:
            VMError: a kernel panic, QEMU exited, or no agent within ``timeout`` (one line, the console log).
        """
        def state():   # a value, never an exception: poll() would take that for "not yet"
            if self.booted():
                return "ready"
            panic = next((ln for ln in self._console().splitlines() if "Kernel panic" in ln), None)
            if panic:
                return panic.split("]", 1)[-1].strip()[:120]
            if self.proc.poll() is not None:
                return f"qemu exit {self.proc.returncode}; {_last_line(self._qemu_log()) or 'see console'}"
            return None

        try:
            got = poll(state, timeout=timeout, interval=0.25, what=f"vm {self.name} to boot")
        except TimeoutError:
            raise VMError(f"vm {self.name} did not boot within {timeout:.0f} s; console log: "
                          f"{self.console_log}") from None
        if got != "ready":
            raise VMError(f"vm {self.name} did not boot ({got}); console log: {self.console_log}")
        return (self.ctl / "ready").read_text().strip()

    def spawn(self, command: str, env: dict[str, str] | None = None, cwd: str = recipe.GUEST_SRC) -> Job:
        """Start ``command`` (bash) in the guest; it runs as root in its own session."""
        self.check_alive()
        base = self.ctl / "jobs" / f"{next(self._jobs):04d}"
        tmp = base.with_suffix(".tmp")
        tmp.write_text(recipe.job_script(command, env, cwd))
        tmp.rename(base.with_suffix(".sh"))   # the agent only picks up complete *.sh files
        return Job(self, base, command)

    def run(self, command: str, timeout: float = 600.0, check: bool = True, env: dict[str, str] | None = None,
            cwd: str = recipe.GUEST_SRC) -> JobResult:
        """Run ``command`` in the guest and wait for it (see :meth:`Job.wait`)."""
        return self.spawn(command, env, cwd).wait(timeout, check)

    def provision(self, command: str = "bash scripts/setup.sh", timeout: float = 600.0) -> JobResult:
        """Provision the guest as the Vagrantfile does (``scripts/setup.sh``), its output kept in
        ``<out>/setup.log``, so that a failure is one line a user can act on.

        Raises:
            VMError: it exited non-zero (one line: the exit status, the output's last line, setup.log and
                the console log), or did not finish within ``timeout``.
        """
        res = self.run(command, timeout=timeout, check=False)
        log = self.out / "setup.log"
        log.write_text(res.output)
        if res.rc != 0:
            raise VMError(f"vm {self.name}: provisioning `{_short(command)}` exited {res.rc}: "
                          f"{_last_line(res.output) or 'no output'} (setup.log: {log}; console log: {self.console_log})")
        return res

    def stop(self, timeout: float = 10.0) -> None:
        """Power a booted guest off (sysrq), or kill QEMU when it is not booted or does not stop in ``timeout``."""
        if self.proc is None:
            return
        if self.proc.poll() is None and self.booted():
            try:
                self.spawn("sync; echo o > /proc/sysrq-trigger")
                self.proc.wait(timeout)
            except (VMError, OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def _console(self) -> str:
        try:
            return self.console_log.read_text(errors="replace")
        except OSError:
            return ""

    def _qemu_log(self) -> str:
        try:
            return (self.out / "qemu.log").read_text(errors="replace")
        except OSError:
            return ""


class VMGroup:
    """VMs booted together, joined by point-to-point links; a context manager that always tears down.

    Args:
        image: a :class:`~testbed.emu.vmimage.Image`.
        out_dir: results folder; each VM gets ``out_dir/<name>`` (``/mnt/out`` in the guest) and a console log.
        names: VM names.
        links: pairs of names, each one Ethernet link (eth0, eth1 ... in the order given, per VM).
        accel: ``tcg`` | ``kvm`` | None (``$TESTBED_VM_ACCEL`` or a timed KVM probe, see ``choose_accel``).
        memory_mb, cpus: per VM.
        checkout: the folder shared read-only at ``/testbed`` (default: this checkout).
    """

    def __init__(self, image, out_dir: Path, names=("vm0",), links=(), *, accel: str | None = None,
                 memory_mb: int = recipe.DEFAULT_MEMORY_MB, cpus: int = 2, checkout: Path = REPO,
                 boot_timeout: float = DEFAULT_BOOT_TIMEOUT):
        if len(set(names)) != len(names) or not names:
            raise VMError(f"vm names must be distinct and at least one: {names!r}")
        for u, v in links:
            if u not in names or v not in names or u == v:
                raise VMError(f"vm link {u}--{v}: both ends must be distinct VMs of {names!r}")
        self.image, self.out_dir, self.names, self.links = image, Path(out_dir), tuple(names), tuple(links)
        self.accel_choice, self.memory_mb, self.cpus = accel, memory_mb, cpus
        self.checkout, self.boot_timeout = Path(checkout), boot_timeout
        self.vms: dict[str, VM] = {}
        self.tmp: Path | None = None
        self.accel: str | None = None
        self.boot_seconds: float | None = None
        self._sigterm = terminate_raises()

    def __getitem__(self, name: str) -> VM:
        return self.vms[name]

    @property
    def share(self) -> Path:
        """Host side of ``/mnt/share``, seen by every VM of the group."""
        return self.tmp / "share"

    def install_file(self, name: str, path: Path, guest_dir: str) -> str:
        """Copy host file ``path`` into VM ``name``'s ``guest_dir`` (a shell word: ``$VAR/...`` expands in
        the guest), executable; returns the guest path. E.g. the host-built link core: the image has no C
        compiler (~150 MB more in a root held in guest RAM) and the guest looks for the same file name in
        its ``$TESTBED_P4_CACHE`` (same checkout, same Debian 12 glibc)."""
        path = Path(path)
        shutil.copy2(path, self.share / path.name)
        target = f"{guest_dir}/{path.name}"
        self.vms[name].run(f"install -D -m 0755 {GUEST_SHARE}/{path.name} {target}", timeout=60)
        return target

    def ifname(self, vm: str, peer: str) -> str:
        """The guest interface of ``vm`` on its (first) link to ``peer``."""
        mine = [(u, v) for u, v in self.links if vm in (u, v)]
        for i, (u, v) in enumerate(mine):
            if peer in (u, v):
                return f"eth{i}"
        raise VMError(f"vm {vm} has no link to {peer}")

    def __enter__(self) -> VMGroup:
        self._sigterm.__enter__()
        try:
            self._start()
        except BaseException:
            self._teardown()
            self._sigterm.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._teardown()
        finally:
            self._sigterm.__exit__(*exc)

    def _configs(self) -> list[recipe.VMConfig]:
        sockets = {pair: self.tmp / f"link{i}.sock" for i, pair in enumerate(self.links)}
        cfgs = []
        for n, name in enumerate(self.names):
            out = self.out_dir / name
            out.mkdir(parents=True, exist_ok=True)
            ctl = self.tmp / name
            ctl.mkdir()
            mine = [pair for pair in self.links if name in pair]
            links = tuple(recipe.Link(f"l{i}", sockets[pair], listen=(pair[0] == name), mac=recipe.mac_address(n, i))
                          for i, pair in enumerate(mine))
            shares = (recipe.Share("src", self.checkout, readonly=True), recipe.Share("ctl", ctl),
                      recipe.Share("out", out), recipe.Share("share", self.share))
            cfgs.append(recipe.VMConfig(name=name, kernel=self.image.kernel, initrd=self.image.initrd,
                                        console_log=self.out_dir / f"{name}-console.log", accel=self.accel,
                                        memory_mb=self.memory_mb, cpus=self.cpus, shares=shares, links=links))
        return cfgs

    def _start(self) -> None:
        t0 = time.monotonic()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.accel = self.accel_choice or choose_accel(self.image)
        self.tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        (self.tmp / OWNER).write_text(f"{os.getpid()} {process_start(os.getpid())}\n")
        self.share.mkdir()
        cfgs = self._configs()
        for cfg in cfgs:
            self.vms[cfg.name] = VM(cfg, self.tmp / cfg.name, self.out_dir / cfg.name)
        # Listening ends first: a connecting -netdev stream fails when its socket is not there yet.
        order = sorted(cfgs, key=lambda c: not any(link.listen for link in c.links))
        for cfg in order:
            vm = self.vms[cfg.name]
            vm.start()
            for link in cfg.links:
                if link.listen:
                    poll(lambda s=link.socket, v=vm: s.exists() or not v.alive(), timeout=30, interval=0.05,
                         what=f"vm {cfg.name}'s link socket {link.socket}")
                    vm.check_alive()
        for name in self.names:
            self.vms[name].wait_ready(self.boot_timeout)
        self.boot_seconds = time.monotonic() - t0

    def _teardown(self) -> None:
        with deferred_signals():
            for vm in self.vms.values():
                try:
                    vm.stop()
                except Exception:  # noqa: BLE001 - keep stopping the others, then kill below
                    if vm.proc is not None and vm.proc.poll() is None:
                        vm.proc.kill()
                        vm.proc.wait()
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)


def _qemu_cmdlines() -> dict[int, list[bytes]]:
    """Running QEMUs whose command line names one of our temporary folders: {pid: argv}."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"qemu-system-x86_64") and any(TMP_PREFIX.encode() in c for c in cmd):
            found[int(proc.name)] = cmd
    return found


def leftovers() -> dict:
    """QEMU processes and temporary folders this module may leave (for tests): {"qemu": [pid], "tmp": [path]}."""
    tmp = sorted(str(p) for p in Path(tempfile.gettempdir()).glob(TMP_PREFIX + "*"))
    return {"qemu": sorted(_qemu_cmdlines()), "tmp": tmp}


def stale_dirs(root: Path | None = None, now: float | None = None) -> list[tuple[Path, str]]:
    """Temporary folders whose VMGroup is gone (its Python process was SIGKILLed or crashed), with why.

    A folder with an ``owner`` file is stale when that process (pid and start time) no longer runs. One
    without (made before owners were recorded, or in the instant before the file is written) is stale only
    when no running QEMU names it and it is older than :data:`UNOWNED_GRACE_S`.
    """
    root = Path(tempfile.gettempdir()) if root is None else root
    now = time.time() if now is None else now
    qemus = None
    stale = []
    for d in sorted(root.glob(TMP_PREFIX + "*")):
        if not d.is_dir() or d.is_symlink():
            continue
        try:
            pid_s, start_s = (d / OWNER).read_text().split()
            pid, start = int(pid_s), (None if start_s == "None" else float(start_s))
        except FileNotFoundError:
            if qemus is None:
                qemus = b"\0".join(b"\0".join(c) for c in _qemu_cmdlines().values())
            try:
                age = now - d.stat().st_mtime
            except OSError:
                continue
            if age > UNOWNED_GRACE_S and str(d).encode() not in qemus:
                stale.append((d, f"no owner recorded, no QEMU uses it, {age / 60:.0f} min old"))
            continue
        except (OSError, ValueError):
            stale.append((d, "unreadable owner file"))
            continue
        if not same_process(pid, start):
            stale.append((d, f"its owner (pid {pid}) is gone"))
    return stale


def remove_stale_dirs(root: Path | None = None, dry_run: bool = False) -> list[tuple[Path, str]]:
    """Remove what :func:`stale_dirs` finds (``testbed clean``, ``make vm-test``); returns them."""
    stale = stale_dirs(root)
    if not dry_run:
        for d, _ in stale:
            shutil.rmtree(d, ignore_errors=True)
    return stale


def _short(command: str, width: int = 80) -> str:
    line = " ".join(command.split())
    return line if len(line) <= width else line[: width - 3] + "..."


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""
