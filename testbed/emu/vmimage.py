"""The test VM's image, built once per recipe and cached (root glue); the KVM-or-TCG decision.

``ensure_image()`` returns the image for the checkout's current recipe (``testbed.vm.recipe``)::

    /var/cache/scaleout-testbed/vm/
        .lock                  flock(2): one builder at a time; released when the builder dies
        <key>/vmlinuz          Debian's stock kernel
        <key>/initrd.cpio      the whole root (uncompressed newc: TCG unpacks it faster than gzip)
        <key>/manifest.txt     kernel version, size, build time
        <key>/*.log            debootstrap, apt, setup.sh logs of the build
        .build-<key>-<pid>/    a build under way (renamed to <key> when complete, removed on failure)

An image folder exists only once complete (atomic rename), so an interrupted build leaves nothing that
looks usable; older keys are removed after a successful build.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.errors import TestbedError
from testbed.poll import poll
from testbed.vm import recipe

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = "scripts/vm/build-image.sh"
P4TOOLS = Path(os.environ.get("P4TOOLS", "/work/shared/p4tools"))
ACCEL_ENV = "TESTBED_VM_ACCEL"
KVM_PROBE_CACHE = Path("/run/scaleout-testbed/vm-kvm-probe")
KVM_PROBE_TIMEOUT = 20.0


class VMError(TestbedError):
    """A VM could not be built, booted or used; the message names the log to read."""


@dataclass(frozen=True)
class Image:
    key: str
    dir: Path

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.cpio"

    def manifest(self) -> dict[str, str]:
        out = {}
        for line in (self.dir / "manifest.txt").read_text().splitlines():
            key, _, value = line.partition(" ")
            out[key] = value
        return out


def _p4tools_digest() -> tuple[str, ...]:
    tarball = P4TOOLS / "p4tools-debian12-amd64.tar.gz"
    if not tarball.is_file():
        return ("p4tools:none",)
    h = hashlib.sha256()
    with open(tarball, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return (f"p4tools:{h.hexdigest()}",)


def image_key(repo: Path = REPO) -> str:
    files = {name: (repo / name).read_bytes() for name in recipe.RECIPE_FILES}
    return recipe.recipe_key(files, recipe.PACKAGES, _p4tools_digest())


def _complete(d: Path) -> bool:
    return all((d / f).is_file() for f in ("vmlinuz", "initrd.cpio", "manifest.txt"))


def _mounted_below(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/mounts") as f:
        return [ln.split()[1] for ln in f if ln.split()[1].startswith(prefix)]


def _remove_build_dir(d: Path) -> None:
    """Remove a failed build, but never through a mount left below it (a bind of /dev or the checkout)."""
    if not d.exists():
        return
    for mnt in sorted(_mounted_below(d), reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    left = _mounted_below(d)
    if left:
        raise VMError(f"image build folder {d} still has mounts ({left[0]} ...); not removing it")
    shutil.rmtree(d, ignore_errors=True)


def ensure_image(repo: Path = REPO, cache_dir: Path = recipe.CACHE_DIR, rebuild: bool = False,
                 say=print) -> tuple[Image, bool]:
    """The cached image of ``repo``'s recipe, built first when missing. Returns (image, built_now).

    Raises:
        VMError: the build failed (one line naming its log).
    """
    key = image_key(repo)
    image = Image(key, cache_dir / key)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released by close, or by the kernel when we die
        if rebuild and image.dir.exists():
            shutil.rmtree(image.dir)
        if _complete(image.dir):
            return image, False
        tmp = cache_dir / f".build-{key}-{os.getpid()}"
        _remove_build_dir(tmp)
        log_path = cache_dir / f"build-{key}.log"
        say(f"vm: building image {key} (debootstrap + Debian's kernel; a few minutes); log {log_path}")
        t0 = time.monotonic()
        try:
            with open(log_path, "w") as log:
                proc = subprocess.Popen(["bash", str(repo / BUILD_SCRIPT), str(repo), str(tmp), *recipe.PACKAGES],
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    rc = proc.wait()
                except BaseException:
                    os.killpg(proc.pid, signal.SIGTERM)   # its EXIT trap unmounts the chroot
                    try:
                        proc.wait(60)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                    raise
            if rc != 0 or not _complete(tmp):
                for f in tmp.glob("*.log"):
                    shutil.copy(f, cache_dir / f"build-{key}-{f.name}")
                raise VMError(f"building the VM image failed (exit {rc}); see {log_path}")
            os.rename(tmp, image.dir)
        finally:
            _remove_build_dir(tmp)
        for old in cache_dir.iterdir():
            if old.is_dir() and old.name != key and not old.name.startswith("."):
                shutil.rmtree(old, ignore_errors=True)
            elif old.is_file() and old.name.startswith("build-") and key not in old.name:
                old.unlink()
        say(f"vm: image {key} built in {time.monotonic() - t0:.0f} s")
        return image, True


def choose_accel(image: Image, say=print) -> str:
    """``kvm`` only when a timed probe boot under KVM reaches the kernel's end; ``tcg`` otherwise.

    ``$TESTBED_VM_ACCEL`` (tcg|kvm) overrides. The probe result is kept in /run (until reboot).
    """
    forced = os.environ.get(ACCEL_ENV, "auto").lower()
    if forced in ("tcg", "kvm"):
        return forced
    if forced != "auto":
        raise VMError(f"{ACCEL_ENV}: unknown accelerator {forced!r}; allowed: auto, tcg, kvm")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    kernel = str(image.kernel.resolve())
    try:
        cached = KVM_PROBE_CACHE.read_text().split()
        if cached[0] == kernel:
            return cached[1]
    except (OSError, IndexError):
        pass
    accel, detail = _probe_kvm(image)
    say(f"vm: KVM probe: {detail} -> {accel}")
    KVM_PROBE_CACHE.parent.mkdir(parents=True, exist_ok=True)
    KVM_PROBE_CACHE.write_text(f"{kernel} {accel}\n")
    return accel


def _probe_kvm(image: Image) -> tuple[str, str]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="scaleout-vm-kvmprobe-") as tmp:
        console, errors = Path(tmp) / "console.log", Path(tmp) / "qemu.log"
        t0 = time.monotonic()
        with open(errors, "wb") as err:
            proc = subprocess.Popen(recipe.kvm_probe_argv(image.kernel, console), stdin=subprocess.DEVNULL,
                                    stdout=err, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            def panicked():
                text = console.read_text(errors="replace") if console.exists() else ""
                return "Kernel panic" in text or proc.poll() is not None

            poll(panicked, timeout=KVM_PROBE_TIMEOUT, interval=0.2, what="the KVM probe kernel")
            text = console.read_text(errors="replace") if console.exists() else ""
            ok = "Kernel panic" in text
            if ok:
                return "kvm", f"the kernel ran to its end in {time.monotonic() - t0:.1f} s"
            lines = [ln for ln in errors.read_text(errors="replace").splitlines() if ln.strip()]
            return "tcg", (f"qemu exited {proc.returncode} after {time.monotonic() - t0:.1f} s before the kernel "
                           f"ended ({lines[0][:120] if lines else 'no message'})")
        except TimeoutError:
            return "tcg", f"no kernel progress within {KVM_PROBE_TIMEOUT:.0f} s (KVM hangs here)"
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
