"""Where a partitioned replica runs: the ``cluster:`` block of a spec, or ``--workers`` (pure; testbed.cluster uses it).

    cluster:
      workers:                                    # one machine per entry, in order (worker 0, 1, ...)
        - root@10.1.0.1                           # user@host[:port]; the underlay is the host's address
        - {ssh: root@127.0.0.1:2202, underlay: 10.99.0.2,
           python: /opt/testbed-venv/bin/python, checkout: /testbed}
      imbalance: 0.1                              # tolerated load imbalance per worker
      known_hosts: ~/.ssh/known_hosts             # host keys checked strictly (default this file)
      identity: ~/.ssh/id_ed25519                 # private key (default: the agent and ~/.ssh/id_*)

    testbed cluster run SPEC --workers root@h1,root@h2 [--underlay IP1,IP2] [--accept-new-host-keys]

``underlay`` is the address the other workers reach this one at for VXLAN (default: ``host`` when it is an
IP address). ``python``/``checkout`` say how to run the worker there (default: the coordinator's own
interpreter and checkout paths: the same layout on every machine). Passwords are never read or stored: key-based auth only (a
``password`` key is refused). Unknown keys and bad values raise a SpecError naming the field.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from testbed.errors import SpecError

DEFAULT_IMBALANCE = 0.10
_SSH_RE = re.compile(r"^(?P<user>[A-Za-z_][A-Za-z0-9_.-]*)@(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)"
                     r"(?::(?P<port>[0-9]+))?$")
WORKER_KEYS = ("ssh", "underlay", "python", "checkout")
CLUSTER_KEYS = ("workers", "imbalance", "known_hosts", "identity")


@dataclass(frozen=True)
class WorkerSpec:
    """One worker machine: how to reach it over SSH and at which address its tunnels end."""

    user: str
    host: str
    port: int = 22
    underlay: str | None = None
    python: str | None = None
    checkout: str | None = None

    @property
    def label(self) -> str:
        return f"{self.user}@{self.host}" + (f":{self.port}" if self.port != 22 else "")


@dataclass(frozen=True)
class ClusterConfig:
    workers: tuple
    imbalance: float = DEFAULT_IMBALANCE
    known_hosts: str | None = None
    identity: str | None = None


def parse_ssh(text, field: str) -> WorkerSpec:
    """``user@host[:port]`` -> WorkerSpec (the user is required: no guessing who logs in)."""
    if not isinstance(text, str) or not (m := _SSH_RE.match(text.strip())):
        raise SpecError(field, f"expected user@host[:port] such as root@10.1.0.1, got {text!r}")
    port = int(m["port"]) if m["port"] else 22
    if not 1 <= port <= 65535:
        raise SpecError(field, f"port {port} is out of range 1..65535")
    host = m["host"].strip("[]")
    underlay = host if _is_ip(host) else None
    return WorkerSpec(m["user"], host, port, underlay)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _worker(raw, field: str) -> WorkerSpec:
    if isinstance(raw, str):
        return parse_ssh(raw, field)
    if not isinstance(raw, dict):
        raise SpecError(field, f"expected user@host[:port] or a mapping with keys {', '.join(WORKER_KEYS)}, "
                               f"got {type(raw).__name__}")
    for key in raw:
        if key == "password":
            raise SpecError(f"{field}.password", "passwords are not read or stored; use key-based auth "
                                                 "(cluster.identity or an SSH agent)")
        if key not in WORKER_KEYS:
            raise SpecError(f"{field}.{key}", f"unknown key; allowed: {', '.join(WORKER_KEYS)}")
    if "ssh" not in raw:
        raise SpecError(f"{field}.ssh", "is required (user@host[:port])")
    w = parse_ssh(raw["ssh"], f"{field}.ssh")
    underlay = raw.get("underlay", w.underlay)
    if underlay is not None and (not isinstance(underlay, str) or not _is_ip(underlay)):
        raise SpecError(f"{field}.underlay", f"expected an IP address, got {underlay!r}")
    for key in ("python", "checkout"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not value.startswith("/")):
            raise SpecError(f"{field}.{key}", f"expected an absolute path, got {value!r}")
    return WorkerSpec(w.user, w.host, w.port, underlay, raw.get("python"), raw.get("checkout"))


def parse_cluster(raw, field: str = "cluster") -> ClusterConfig:
    """The ``cluster:`` block of a spec."""
    if not isinstance(raw, dict):
        raise SpecError(field, f"expected a mapping with keys {', '.join(CLUSTER_KEYS)}, got {type(raw).__name__}")
    for key in raw:
        if key == "password":
            raise SpecError(f"{field}.password", "passwords are not read or stored; use key-based auth")
        if key not in CLUSTER_KEYS:
            raise SpecError(f"{field}.{key}", f"unknown key; allowed: {', '.join(CLUSTER_KEYS)}")
    workers = raw.get("workers")
    if not isinstance(workers, list) or not workers:
        raise SpecError(f"{field}.workers", f"expected a non-empty list of workers, got {workers!r}")
    parsed = tuple(_worker(w, f"{field}.workers[{i}]") for i, w in enumerate(workers))
    check_distinct(parsed, f"{field}.workers")
    imbalance = raw.get("imbalance", DEFAULT_IMBALANCE)
    if isinstance(imbalance, bool) or not isinstance(imbalance, (int, float)) or not 0 < imbalance < 1:
        raise SpecError(f"{field}.imbalance", f"expected a number between 0 and 1 such as 0.1, got {imbalance!r}")
    for key in ("known_hosts", "identity"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise SpecError(f"{field}.{key}", f"expected a file path, got {raw[key]!r}")
    return ClusterConfig(parsed, float(imbalance), raw.get("known_hosts"), raw.get("identity"))


def parse_workers(text: str, underlay: str | None = None, field: str = "--workers") -> tuple:
    """``--workers user@h1,user@h2`` with an optional ``--underlay IP1,IP2`` (same order)."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(field, "expected user@host[:port],user@host[:port],...")
    workers = [parse_ssh(part, f"{field}[{i}]") for i, part in enumerate(text.split(","))]
    if underlay is not None:
        ips = [p.strip() for p in underlay.split(",")]
        if len(ips) != len(workers):
            raise SpecError("--underlay", f"{len(ips)} addresses for {len(workers)} workers; give one per worker")
        for i, ip in enumerate(ips):
            if not _is_ip(ip):
                raise SpecError(f"--underlay[{i}]", f"expected an IP address, got {ip!r}")
        workers = [WorkerSpec(w.user, w.host, w.port, ip) for w, ip in zip(workers, ips, strict=True)]
    check_distinct(workers, field)
    return tuple(workers)


def check_distinct(workers, field: str) -> None:
    """Two entries for one machine would build two parts under one run lock and one set of names."""
    seen = {}
    for i, w in enumerate(workers):
        key = (w.host, w.port)
        if key in seen:
            raise SpecError(f"{field}[{i}]", f"{w.label} is also worker {seen[key]}; each worker is its own machine")
        seen[key] = i


def require_underlays(workers, field: str = "cluster.workers") -> None:
    for i, w in enumerate(workers):
        if w.underlay is None:
            raise SpecError(f"{field}[{i}].underlay", f"{w.host} is a name, not an address: give the address the "
                                                      "other workers reach it at (--underlay or underlay:)")
