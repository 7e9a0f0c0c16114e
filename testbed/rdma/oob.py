"""Out-of-band connection setup over TCP, as perftest does: each side sends one JSON line describing
its QP (QPN, first PSN, IP, RoCE port) and memory region (addr, rkey, length), then the requester runs
the test and both sides exchange a closing line (with a digest of the target region when verifying).

    client                                  server (testbed rdma server)
      | ---- {"test", "size", "qp": {...}} ---> |  creates device + QP + region
      | <--- {"qp": {...}, "mr": {...}} -------- |
      |        ... RoCE traffic on UDP 4791 ...  |
      | ---- {"done": true} ------------------> |
      | <--- {"sha256": ..., "stats": {...}} --- |
"""

from __future__ import annotations

import json
import socket

from testbed.poll import poll
from testbed.rdma.verbs import RdmaError
from testbed.sockio import ShortRead, recv_exact

#: perftest's default TCP port for the exchange.
DEFAULT_PORT = 18515
_MAX_LINE = 1 << 20


class Channel:
    """Newline-delimited JSON over a connected TCP socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = b""

    @classmethod
    def connect(cls, host: str, port: int = DEFAULT_PORT, timeout: float = 10.0,
                wait: float = 0.0, source: str | None = None) -> "Channel":
        """Connect to the server; with ``wait`` > 0 keep trying that long (a server still starting).

        ``source`` picks the local address (and so the RoCE endpoint's) on a multi-homed host.
        """
        def attempt():
            return socket.create_connection((host, port), timeout=timeout,
                                            source_address=(source, 0) if source else None)

        try:
            sock = poll(attempt, wait, 0.05, f"RDMA server at {host}:{port}") if wait > 0 else attempt()
        except (OSError, TimeoutError) as exc:
            raise RdmaError(f"cannot reach the RDMA server at {host}:{port} "
                            f"({getattr(exc, 'strerror', None) or exc}); is 'testbed rdma server' running "
                            f"there and listening on {host}? In the machine's own namespace it listens on "
                            "127.0.0.1 only unless started with --bind ADDR") from exc
        sock.settimeout(None)
        return cls(sock)

    def send(self, doc: dict) -> None:
        self.sock.sendall(json.dumps(doc).encode() + b"\n")

    def recv(self, timeout: float | None = 30.0) -> dict:
        self.sock.settimeout(timeout)
        try:
            while b"\n" not in self._buf:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise RdmaError("peer closed the out-of-band connection")
                self._buf += chunk
                if len(self._buf) > _MAX_LINE:
                    raise RdmaError("out-of-band message too long")
        except socket.timeout as exc:
            raise RdmaError(f"no out-of-band message within {timeout:g} s") from exc
        finally:
            self.sock.settimeout(None)
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            doc = json.loads(line)
        except ValueError as exc:
            raise RdmaError(f"bad out-of-band message: {line[:80]!r}") from exc
        if not isinstance(doc, dict):
            raise RdmaError("out-of-band message is not an object")
        return doc

    def ready(self) -> bool:
        """True when a complete line (or EOF) is waiting, without blocking."""
        if b"\n" in self._buf:
            return True
        self.sock.setblocking(False)
        try:
            chunk = self.sock.recv(65536)
        except BlockingIOError:
            return False
        finally:
            self.sock.setblocking(True)
        if not chunk:
            return True  # EOF: recv() will raise
        self._buf += chunk
        return b"\n" in self._buf

    @property
    def local_ip(self) -> str:
        return self.sock.getsockname()[0]

    def close(self) -> None:
        self.sock.close()


def read_exact(sock, n: int, what: str, timeout: float = 30.0, peer: str = "peer") -> bytes:
    """Exactly ``n`` bytes from a TCP side channel (rdma-core's fixed-size exchanges: ibv_rc_pingpong's and
    perftest's), or an RdmaError naming ``what`` was missing and from whom."""
    sock.settimeout(timeout)
    try:
        return recv_exact(sock, n)
    except ShortRead as exc:
        raise RdmaError(f"{peer} closed the connection before sending {what} ({exc.got}/{n} B)") from None
    except socket.timeout as exc:
        raise RdmaError(f"no {what} from the {peer} within {timeout:g} s") from exc
