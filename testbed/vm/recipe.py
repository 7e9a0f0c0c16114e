"""What goes into the test VM and how QEMU is started (pure: no root, no processes).

The image is built from Debian's packages only (``scripts/vm/build-image.sh``): ``debootstrap
--variant=minbase bookworm``, :data:`PACKAGES` installed in the chroot, the project's own
``scripts/setup.sh`` run there (venv, BMv2), Debian's stock ``linux-image-6.1.0-*-amd64`` unpacked with
``dpkg-deb -x`` and its whole module tree, all packed as the initramfs (``rdinit=/init``). It is cached
under :data:`CACHE_DIR`/<key>, where the key hashes everything that decides its content
(:func:`recipe_key`), so changing the recipe rebuilds it and nothing else does.

One VM, as :func:`qemu_argv` starts it::

    qemu-system-x86_64 -accel tcg -cpu max -m 3072 -kernel vmlinuz -initrd initrd.cpio -append "... rdinit=/init"
        -virtfs src  (the checkout, read-only)  -> /testbed
        -virtfs ctl  (job spool, shared files)  -> /mnt/ctl
        -virtfs out  (results copied back)      -> /mnt/out
        -netdev stream,unix socket  <-- a point-to-point Ethernet link to another VM (eth0, eth1 ...)
        -serial file:console.log

Memory: the root lives in RAM twice while the kernel unpacks it (~0.6 GB archive + files), so the guest
needs at least :data:`MIN_MEMORY_MB`; 1 GB fails to unpack.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from testbed.errors import UsageError

#: Where built images live, one folder per recipe key.
CACHE_DIR = Path("/var/cache/scaleout-testbed/vm")
#: Debian packages installed into the image (scripts/setup.sh's own list is installed by setup.sh itself,
#: but naming it here lets the chroot resolve everything in one apt run).
PACKAGES = (
    "bash", "busybox", "kmod", "iproute2", "iputils-ping", "procps", "psmisc", "make", "python3",
    "python3-venv", "python3-pip", "mininet", "openvswitch-switch", "iperf3", "tcpdump", "tshark", "ethtool",
    "rdma-core", "ibverbs-utils", "ibverbs-providers", "perftest", "python3-pyverbs",
    "openssh-server", "openssh-client",   # sshd for the partitioned-replica test (tests/vm/test_cluster_vm.py)
)
#: Files of the checkout whose content decides the image (edit one: the image is rebuilt).
RECIPE_FILES = (
    "scripts/vm/build-image.sh", "scripts/vm/guest-init.sh", "scripts/setup.sh", "pyproject.toml",
    "testbed/data/bind_loopback.c",
)
MIN_MEMORY_MB = 1536
DEFAULT_MEMORY_MB = 3072
GUEST_VENV = "/opt/testbed-venv"
#: Guest paths of the three 9p shares.
GUEST_SRC, GUEST_CTL, GUEST_OUT = "/testbed", "/mnt/ctl", "/mnt/out"


def recipe_key(files: dict[str, bytes], packages: tuple[str, ...] = PACKAGES, extra: tuple[str, ...] = ()) -> str:
    """Cache key of an image: a hash of the recipe files' content, the package list and ``extra``
    (e.g. the BMv2 tarball's hash). Order of ``files`` does not matter."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    h.update("\0".join(packages).encode())
    h.update("\0".join(extra).encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Share:
    """A host folder exported to the guest with 9p (``-virtfs``) under ``tag``."""

    tag: str
    path: Path
    readonly: bool = False


@dataclass(frozen=True)
class Link:
    """One end of a point-to-point Ethernet link between two VMs (a unix stream socket)."""

    netdev: str
    socket: Path
    listen: bool
    mac: str


@dataclass(frozen=True)
class VMConfig:
    name: str
    kernel: Path
    initrd: Path
    console_log: Path
    accel: str = "tcg"
    memory_mb: int = DEFAULT_MEMORY_MB
    cpus: int = 2
    shares: tuple[Share, ...] = ()
    links: tuple[Link, ...] = field(default=())

    def __post_init__(self):
        if self.accel not in ("tcg", "kvm"):
            raise UsageError(f"vm.accel: unknown accelerator {self.accel!r}; allowed: tcg, kvm")
        if self.memory_mb < MIN_MEMORY_MB:
            raise UsageError(f"vm.memory_mb: {self.memory_mb} MB is too little to unpack the initramfs root; "
                             f"give the guest at least {MIN_MEMORY_MB} MB")
        if self.cpus < 1:
            raise UsageError(f"vm.cpus: {self.cpus} must be at least 1")
        if not self.name.replace("-", "").isalnum():
            raise UsageError(f"vm.name: {self.name!r} must be letters, digits and '-'")


def mac_address(vm_index: int, link_index: int) -> str:
    """A locally administered, unicast MAC unique per (VM, link)."""
    if not (0 <= vm_index < 256 and 0 <= link_index < 256):
        raise UsageError(f"vm: index out of range for a MAC address ({vm_index}, {link_index})")
    return f"52:54:00:5b:{vm_index:02x}:{link_index:02x}"


def kernel_cmdline(name: str) -> str:
    """Serial console, the initramfs root's /init as PID 1, and a panic that ends QEMU (-no-reboot)."""
    return f"console=ttyS0 rdinit=/init panic=1 net.ifnames=0 loglevel=4 testbed.name={name}"


def accel_args(accel: str) -> list[str]:
    return ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else ["-accel", "tcg", "-cpu", "max"]


def qemu_argv(cfg: VMConfig, qemu: str = "qemu-system-x86_64") -> list[str]:
    """The QEMU command line of one VM (no network but ``cfg.links``; no display; no monitor)."""
    argv = [qemu, "-name", cfg.name, "-machine", "q35", *accel_args(cfg.accel), "-smp", str(cfg.cpus),
            "-m", str(cfg.memory_mb), "-kernel", str(cfg.kernel), "-initrd", str(cfg.initrd),
            "-append", kernel_cmdline(cfg.name), "-nodefaults", "-no-user-config", "-display", "none",
            "-no-reboot", "-monitor", "none", "-serial", f"file:{cfg.console_log}"]
    for share in cfg.shares:
        spec = f"local,path={share.path},mount_tag={share.tag},security_model=none,id={share.tag}"
        argv += ["-virtfs", spec + (",readonly=on" if share.readonly else "")]
    for link in cfg.links:
        server = "on" if link.listen else "off"
        argv += ["-netdev", f"stream,id={link.netdev},server={server},addr.type=unix,addr.path={link.socket}",
                 "-device", f"virtio-net-pci,netdev={link.netdev},mac={link.mac}"]
    return argv


def kvm_probe_argv(kernel: Path, console_log: Path, qemu: str = "qemu-system-x86_64") -> list[str]:
    """Boot the kernel under KVM with no root at all: a working KVM reaches "Kernel panic" (no root fs) in
    about a second and QEMU exits (-no-reboot, panic=1); a broken one hangs right after the kernel starts."""
    return [qemu, "-machine", "q35", *accel_args("kvm"), "-m", "256", "-kernel", str(kernel),
            "-append", "console=ttyS0 panic=1 loglevel=4", "-nodefaults", "-no-user-config", "-display", "none",
            "-no-reboot", "-monitor", "none", "-serial", f"file:{console_log}"]


def job_script(command: str, env: dict[str, str] | None = None, cwd: str = GUEST_SRC) -> str:
    """The bash script the guest agent runs for one command (fails on the first error of ``command``'s
    pipeline only if the command itself says so; the exit status is the command's)."""
    lines = ["#!/bin/bash", f"cd {shell_quote(cwd)} || exit 125"]
    for key, value in sorted((env or {}).items()):
        if not key.isidentifier():
            raise UsageError(f"vm.run env: {key!r} is not a valid variable name")
        lines.append(f"export {key}={shell_quote(value)}")
    lines.append(command)
    return "\n".join(lines) + "\n"


def shell_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"
