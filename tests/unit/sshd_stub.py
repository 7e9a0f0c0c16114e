"""A real SSH server on 127.0.0.1 for the orchestrator's tests, without root or OpenSSH's sshd.

paramiko's server side speaks the real protocol (key exchange, host key, public-key auth, channels,
``tcpip-forward``), so the client code under test (``testbed.cluster.ssh``) is exercised exactly as
against sshd. Exec requests run as local ``bash -c`` processes (in their own session, so a test can
kill one as a crashed worker), remote forwards listen on the loopback address asked for.

Not a fake of the code under test: it only stands in for the machine at the other end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import paramiko

from testbed.topo.workers import WorkerSpec

REPO = Path(__file__).resolve().parents[2]
USER = "tester"


class _Iface(paramiko.ServerInterface):
    def __init__(self, server: "SshdStub", transport):
        self.server, self.transport = server, transport

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_password(self, username, password):
        self.server.password_attempts += 1
        return paramiko.AUTH_FAILED

    def check_auth_publickey(self, username, key):
        if username == self.server.user and key.get_base64() == self.server.authorized.get_base64():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        self.server.commands.append(command.decode())
        proc = subprocess.Popen(["bash", "-c", command.decode()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        self.server.procs.append((command.decode(), proc))
        threading.Thread(target=_serve_exec, args=(channel, proc), daemon=True).start()
        return True

    def check_port_forward_request(self, address, port):
        if address != "127.0.0.1":
            self.server.refused_forwards.append(address)
            return False
        lsock = socket.socket()
        lsock.bind((address, port))
        lsock.listen(8)
        bound = lsock.getsockname()[1]
        self.server.forwards[bound] = lsock
        threading.Thread(target=_accept_forward, args=(self.transport, lsock, address, bound), daemon=True).start()
        return bound

    def cancel_port_forward_request(self, address, port):
        lsock = self.server.forwards.pop(port, None)
        if lsock is not None:
            lsock.close()


def _serve_exec(chan, proc) -> None:
    def stdin_pump():
        try:
            while True:
                data = chan.recv(65536)
                if not data:
                    break
                proc.stdin.write(data)
                proc.stdin.flush()
        except (OSError, ValueError):
            pass
        finally:
            try:
                proc.stdin.close()     # what sshd does when the client closes: the command sees EOF
            except OSError:
                pass

    def err_pump():
        for chunk in iter(lambda: proc.stderr.read1(65536), b""):
            try:
                chan.sendall_stderr(chunk)
            except OSError:
                break

    threads = [threading.Thread(target=stdin_pump, daemon=True), threading.Thread(target=err_pump, daemon=True)]
    for t in threads:
        t.start()
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):
        try:
            chan.sendall(chunk)
        except OSError:
            break
    rc = proc.wait()
    threads[1].join(5)
    try:
        chan.send_exit_status(rc if rc >= 0 else 128 - rc)
        chan.close()
    except OSError:
        pass


def _accept_forward(transport, lsock, address, port) -> None:
    while True:
        try:
            conn, peer = lsock.accept()
        except OSError:
            return
        try:
            chan = transport.open_forwarded_tcpip_channel(peer, (address, port))
        except Exception:  # noqa: BLE001 - the client refused or went away
            conn.close()
            continue
        threading.Thread(target=_pipe, args=(conn, chan), daemon=True).start()


def _pipe(conn, chan) -> None:
    import select

    try:
        while True:
            r, _, _ = select.select([conn, chan], [], [], 30)
            if not r:
                break
            if conn in r:
                data = conn.recv(65536)
                if not data:
                    break
                chan.sendall(data)
            if chan in r:
                data = chan.recv(65536)
                if not data:
                    break
                conn.sendall(data)
    except OSError:
        pass
    finally:
        conn.close()
        chan.close()


class SshdStub:
    """``with SshdStub(user, authorized_key) as sshd:`` -- ``sshd.port``, ``sshd.host_key``, ``sshd.procs``."""

    def __init__(self, user: str, authorized: paramiko.PKey, host_key: paramiko.PKey | None = None):
        self.user, self.authorized = user, authorized
        self.host_key = host_key or paramiko.ECDSAKey.generate()
        self.commands: list[str] = []
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.forwards: dict[int, socket.socket] = {}
        self.refused_forwards: list[str] = []
        self.password_attempts = 0
        self.transports: list[paramiko.Transport] = []
        self.channels: list[paramiko.Channel] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> "SshdStub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()
        for t in self.transports:
            t.close()
        for lsock in list(self.forwards.values()):
            lsock.close()
        for _, proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key.get_name()} {self.host_key.get_base64()}\n"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            t = paramiko.Transport(conn)
            t.add_server_key(self.host_key)
            self.transports.append(t)
            try:
                t.start_server(server=_Iface(self, t))
            except (paramiko.SSHException, EOFError, OSError):
                continue
            threading.Thread(target=self._channels, args=(t,), daemon=True).start()

    def _channels(self, t) -> None:
        while t.is_active():
            chan = t.accept(1.0)   # served from check_channel_exec_request; kept: a dropped Channel closes
            if chan is not None:
                self.channels.append(chan)

    def worker_procs(self) -> list[subprocess.Popen]:
        return [p for cmd, p in self.procs if "testbed.cluster.worker run" in cmd]


# -- what the orchestrator's tests put around the server ----------------------------------------------------
def new_client_key(directory: Path):
    """A fresh ECDSA client key, and the file it is written to (what ``--identity`` names)."""
    key = paramiko.ECDSAKey.generate()
    path = directory / "id_ecdsa"
    key.write_private_key_file(str(path))
    return key, path


def worker(sshd: SshdStub, underlay: str) -> WorkerSpec:
    """A worker reached through ``sshd``, running this checkout with this interpreter."""
    return WorkerSpec(USER, "127.0.0.1", sshd.port, underlay, python=sys.executable, checkout=str(REPO))


def known_hosts(directory: Path, *servers: SshdStub) -> Path:
    """A known_hosts file that knows exactly ``servers``."""
    path = directory / "known_hosts"
    path.write_text("".join(s.known_hosts_line() for s in servers))
    return path


class Listener:
    """Stands in for the controller: records the lines that reach it through the forwards (one reader
    thread per connection, so several workers can be connected at once)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn):
        with conn:
            data = b""
            while chunk := conn.recv(4096):
                data += chunk
        with self.lock:
            self.lines += data.decode().splitlines()
