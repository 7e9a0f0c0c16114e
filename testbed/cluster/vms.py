"""Test VMs as cluster workers (root glue): a :class:`~testbed.emu.vm.VMGroup` whose VMs each run OpenSSH's
sshd on an underlay, so that ``testbed cluster run`` in VM ``a`` reaches every VM as a worker.

    with cluster_vms(image, out_dir, cpus=1) as g:     # booted, provisioned, sshd up, keys exchanged
        g["a"].run(f"testbed cluster run {SPEC} ...")  # SPEC: fat-tree k=4 with a cluster: block (a and b)

One way to make such VMs, used by ``tests/vm/test_cluster_vm.py`` and ``testbed bench cluster``:

* the VMs are joined by one socket link (the underlay, 10.99.0.1/2, MTU 1600: VXLAN's 50 bytes above the
  fabric's 1500 without fragmenting);
* each is provisioned with scripts/setup.sh (both at once; output in ``<out>/<vm>/setup.log``) and gets
  fresh host keys and sshd listening on its underlay address only (keys only, root by key);
* VM ``a`` gets a client key; every VM authorises it; a's known_hosts holds every VM's host key, so the
  coordinator's strict host-key checking is exercised for real;
* ``/mnt/share/cluster-k4.yaml``: the shipped fat-tree k=4 with ``cluster: workers`` = every VM, a's
  known_hosts and key.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from testbed.emu.vm import VMGroup
from testbed.vm import recipe

UNDERLAY = {"a": "10.99.0.1", "b": "10.99.0.2"}
SPEC = "/mnt/share/cluster-k4.yaml"
KNOWN_HOSTS = "/root/.ssh/known_hosts"
IDENTITY = "/root/.ssh/id_ed25519"
PROVISION_TIMEOUT = 900.0


def worker(name: str) -> str:
    """The ``user@host`` of VM ``name`` as a worker."""
    return f"root@{UNDERLAY[name]}"


def _sshd(dev: str, ip: str, name: str) -> str:
    return (f"ip link set {dev} mtu 1600 up && ip addr add {ip}/24 dev {dev} && "
            "rm -f /etc/ssh/ssh_host_* && ssh-keygen -q -A && mkdir -p /run/sshd /root/.ssh && "
            f"chmod 700 /root/.ssh && /usr/sbin/sshd -o ListenAddress={ip} -o PasswordAuthentication=no "
            "-o KbdInteractiveAuthentication=no -o PermitRootLogin=prohibit-password && "
            f"cp /etc/ssh/ssh_host_ed25519_key.pub /mnt/share/host-{name}.pub")


def provision(g: VMGroup) -> None:
    """Make the booted VMs ``a`` and ``b`` of ``g`` cluster workers (see the module docstring).

    Raises:
        VMError: provisioning or sshd failed in a VM (its job output's path), or it did not finish in time.
    """
    from testbed.topo.spec import resolve_spec

    jobs = []
    for name, ip in UNDERLAY.items():   # both VMs at once: provisioning, underlay, fresh host keys, sshd
        dev = g.ifname(name, "b" if name == "a" else "a")
        jobs.append(g[name].spawn(f"bash scripts/setup.sh > /mnt/out/setup.log 2>&1 && {_sshd(dev, ip, name)}"))
    for job in jobs:
        job.wait(PROVISION_TIMEOUT)
    g["a"].run(f"ssh-keygen -q -t ed25519 -N '' -f {IDENTITY} && cp {IDENTITY}.pub /mnt/share/client.pub")
    known = "".join(f"{ip} {' '.join((g.share / f'host-{n}.pub').read_text().split()[:2])}\n"
                    for n, ip in UNDERLAY.items())
    (g.share / "known_hosts").write_text(known)
    for name in UNDERLAY:
        g[name].run("cp /mnt/share/client.pub /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys")
    g["a"].run(f"cp /mnt/share/known_hosts {KNOWN_HOSTS}")
    spec = resolve_spec("fat-tree-k4").read_text()
    workers = ", ".join(worker(n) for n in UNDERLAY)
    (g.share / Path(SPEC).name).write_text(
        spec + f"\ncluster:\n  workers: [{workers}]\n  known_hosts: {KNOWN_HOSTS}\n  identity: {IDENTITY}\n")


@contextmanager
def cluster_vms(image, out_dir: Path, *, cpus: int = 2, memory_mb: int = recipe.DEFAULT_MEMORY_MB):
    """VMs ``a`` and ``b`` booted, provisioned and reachable as workers; always torn down on leaving."""
    with VMGroup(image, out_dir, names=tuple(UNDERLAY), links=[("a", "b")], cpus=cpus, memory_mb=memory_mb) as g:
        provision(g)
        yield g
