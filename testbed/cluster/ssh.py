"""SSH to the workers with paramiko (root glue): strict host keys, keys only, loopback port forwards.

    conn = connect(worker, SshOptions(known_hosts=..., identity=..., accept_new=False))
    conn.run("mktemp -d")                          # -> (rc, stdout, stderr)
    conn.put_bytes(data, "/tmp/x/job.json")        # through `cat >` (no SFTP subsystem needed)
    conn.get_tree("/tmp/x/out", local_dir)         # through `tar c` (members checked before extraction)
    port = conn.forward_remote(6653)               # worker's 127.0.0.1:<port> -> our 127.0.0.1:6653
    chan = conn.start("python -m testbed.cluster.worker run ...")

Security choices, each on purpose:

* Host keys are checked against ``known_hosts`` (default ``~/.ssh/known_hosts``) with paramiko's
  ``RejectPolicy``: an unknown host is refused with the command that adds it. ``accept_new`` (the CLI's
  ``--accept-new-host-keys``) records a *new* host's key in that file (OpenSSH's ``accept-new``); a
  *changed* key is always refused (paramiko raises ``BadHostKeyException`` before any policy).
* Authentication is by key only: ``identity`` or the agent and ``~/.ssh/id_*``; no password is ever
  asked for, passed or stored.
* The controller's OpenFlow port is reached by a *remote* forward bound to the worker's 127.0.0.1 (sshd
  binds remote forwards to loopback unless ``GatewayPorts`` says otherwise; we ask for 127.0.0.1
  explicitly), connected to the coordinator's 127.0.0.1: nothing listens on a public address.
"""

from __future__ import annotations

import io
import os
import select
import shlex
import socket
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path

from testbed.errors import SpecError, TestbedError

CONNECT_TIMEOUT = 20.0


class SshError(TestbedError):
    """A worker could not be reached or used over SSH (message names the worker)."""


@dataclass(frozen=True)
class SshOptions:
    known_hosts: str | None = None     # default ~/.ssh/known_hosts
    identity: str | None = None        # default: agent + ~/.ssh/id_*
    accept_new: bool = False

    @property
    def known_hosts_path(self) -> Path:
        return Path(os.path.expanduser(self.known_hosts or "~/.ssh/known_hosts"))


def _paramiko():
    try:
        import paramiko
    except ImportError:
        raise SshError("paramiko is not installed: run `sudo make setup`") from None
    return paramiko


def _host_key_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class Connection:
    """One worker's SSH connection (a paramiko client); ``close()`` ends it and its forwards."""

    def __init__(self, worker, client, label: str):
        self.worker, self.client, self.label = worker, client, label
        self.transport = client.get_transport()
        self._forwards: list[int] = []
        self._pumps: list[threading.Thread] = []

    def alive(self) -> bool:
        return self.transport is not None and self.transport.is_active()

    def run(self, command: str, stdin: bytes | None = None, timeout: float = 120.0) -> tuple[int, bytes, bytes]:
        """Run ``command`` to its end. Returns (exit status, stdout, stderr)."""
        chan = self._session(command)
        chan.settimeout(timeout)
        out, err = bytearray(), bytearray()
        try:
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            while True:
                r, _, _ = select.select([chan], [], [], timeout)
                if not r:
                    raise SshError(f"{self.label}: `{command[:80]}` did not finish within {timeout:.0f} s")
                got = False
                while chan.recv_ready():
                    out += chan.recv(65536)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    got = True
                if not got and chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if not got and chan.closed:
                    break
            return chan.recv_exit_status(), bytes(out), bytes(err)
        except socket.timeout:
            raise SshError(f"{self.label}: `{command[:80]}` did not finish within {timeout:.0f} s") from None
        finally:
            chan.close()

    def check(self, command: str, stdin: bytes | None = None, timeout: float = 120.0) -> bytes:
        rc, out, err = self.run(command, stdin, timeout)
        if rc != 0:
            last = (err or out).decode(errors="replace").strip().splitlines()
            raise SshError(f"{self.label}: `{command[:80]}` exited {rc}: {last[-1][:200] if last else 'no output'}")
        return out

    def start(self, command: str):
        """Start ``command``; returns its paramiko Channel (stdin, stdout, stderr streams)."""
        return self._session(command)

    def _session(self, command: str):
        if not self.alive():
            raise SshError(f"{self.label}: the SSH connection is closed")
        chan = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        chan.exec_command(command)
        return chan

    def put_bytes(self, data: bytes, path: str) -> None:
        self.check(f"umask 077 && cat > {shlex.quote(path)}", stdin=data)

    def get_tree(self, remote_dir: str, local_dir: Path, timeout: float = 300.0) -> int:
        """Copy ``remote_dir``'s files into ``local_dir``. Returns the number of files."""
        out = self.check(f"tar -C {shlex.quote(remote_dir)} -cf - .", timeout=timeout)
        local_dir = Path(local_dir)
        local_dir.mkdir(parents=True, exist_ok=True)
        count = 0
        with tarfile.open(fileobj=io.BytesIO(out)) as tar:
            for m in tar.getmembers():
                target = (local_dir / m.name).resolve()
                if not str(target).startswith(str(local_dir.resolve())) or not (m.isfile() or m.isdir()):
                    continue    # no links, devices or paths leaving the folder
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                target.write_bytes(src.read() if src else b"")
                count += 1
        return count

    def forward_remote(self, local_port: int, local_host: str = "127.0.0.1") -> int:
        """Ask the worker to listen on its 127.0.0.1:<port> and forward to our ``local_host:local_port``."""
        def handler(chan, origin, server):
            t = threading.Thread(target=_pump, args=(chan, local_host, local_port), daemon=True,
                                 name=f"fwd-{self.label}")
            t.start()
            self._pumps.append(t)

        try:
            port = self.transport.request_port_forward("127.0.0.1", 0, handler=handler)
        except Exception as exc:  # paramiko.SSHException; the server refused
            raise SshError(f"{self.label}: the SSH server refused a port forward to 127.0.0.1 ({exc}); "
                           "allow it (sshd AllowTcpForwarding remote)") from None
        self._forwards.append(port)
        return port

    def close(self) -> None:
        for port in self._forwards:
            try:
                self.transport.cancel_port_forward("127.0.0.1", port)
            except Exception:  # noqa: BLE001 - the connection may already be gone
                pass
        self._forwards.clear()
        self.client.close()


def _pump(chan, host: str, port: int) -> None:
    """Copy bytes both ways between a forwarded channel and a local TCP connection until either closes."""
    try:
        sock = socket.create_connection((host, port), timeout=10)
    except OSError:
        chan.close()
        return
    sock.settimeout(None)
    try:
        while True:
            r, _, _ = select.select([chan, sock], [], [], 60)
            if chan in r:
                data = chan.recv(65536)
                if not data:
                    break
                sock.sendall(data)
            if sock in r:
                data = sock.recv(65536)
                if not data:
                    break
                chan.sendall(data)
            if chan.closed:
                break
    except OSError:
        pass
    finally:
        sock.close()
        chan.close()


def connect(worker, options: SshOptions, field: str = "cluster.workers"):
    """Connect to ``worker`` (a :class:`~testbed.topo.workers.WorkerSpec`).

    Raises:
        SpecError: unknown or changed host key, authentication refused (exit 2: fix the input).
        SshError: the machine cannot be reached.
    """
    paramiko = _paramiko()
    label = worker.label
    client = paramiko.SSHClient()
    path = options.known_hosts_path
    if path.is_file():
        try:
            client.load_host_keys(str(path))
        except (OSError, paramiko.SSHException) as exc:
            raise SpecError("known_hosts", f"cannot read {path}: {exc}") from None
    if options.accept_new:
        client.set_missing_host_key_policy(_AcceptNew(path))
    else:
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    pkey = load_identity(options.identity) if options.identity else None
    name = _host_key_name(worker.host, worker.port)
    try:
        client.connect(worker.host, port=worker.port, username=worker.user, pkey=pkey,
                       allow_agent=True, look_for_keys=pkey is None, timeout=CONNECT_TIMEOUT,
                       banner_timeout=CONNECT_TIMEOUT, auth_timeout=CONNECT_TIMEOUT)
    except paramiko.BadHostKeyException:
        client.close()
        raise SpecError(field, f"{label}: the host key differs from the one in {path} (someone may be "
                               f"impersonating it, or it was reinstalled); check it, then remove the old entry "
                               f"with `ssh-keygen -R '{name}' -f {path}`") from None
    except paramiko.AuthenticationException:
        client.close()
        raise SpecError(field, f"{label}: key authentication refused (no password is tried); give a key its "
                               "authorized_keys accepts (--identity / cluster.identity, or an SSH agent)") from None
    except paramiko.SSHException as exc:
        client.close()
        if "not found in known_hosts" in str(exc):
            raise SpecError(field, f"{label}: unknown host key (not in {path}); verify it and add it "
                                   f"(`ssh-keyscan -p {worker.port} {worker.host} >> {path}`), or pass "
                                   "--accept-new-host-keys to record a new host's key") from None
        raise SshError(f"{label}: SSH failed: {exc}") from None
    except OSError as exc:
        client.close()
        raise SshError(f"{label}: cannot connect to port {worker.port}: {exc.strerror or exc}") from None
    return Connection(worker, client, label)


def load_identity(path: str):
    """The private key at ``path`` (an encrypted one belongs in an agent: no passphrase is asked for)."""
    paramiko = _paramiko()
    full = os.path.expanduser(path)
    if not os.path.isfile(full):
        raise SpecError("identity", f"no private key at {full}")
    try:
        return paramiko.PKey.from_path(full)
    except paramiko.PasswordRequiredException:
        raise SpecError("identity", f"{full} is encrypted; load it into an SSH agent (ssh-add) and omit "
                                    "--identity (no passphrase is asked for or stored)") from None
    except (paramiko.SSHException, OSError, ValueError) as exc:
        raise SpecError("identity", f"{full} is not a private key paramiko can read: {exc}") from None


class _AcceptNew:
    """OpenSSH's ``StrictHostKeyChecking=accept-new``: record an unknown host's key, never a changed one."""

    def __init__(self, path: Path):
        self.path = path

    def missing_host_key(self, client, hostname, key):
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)
