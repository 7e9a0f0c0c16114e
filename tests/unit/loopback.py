"""Loopback helpers for the soft-RDMA tools' unit tests: a free UDP port, and a server in a thread.

The RDMA servers (``serve_perftest``, ``serve_pingpong``) call ``ready(port)`` once their TCP side listens;
a test runs one in a thread, starts its client at that port, then reads the server's report.
"""

from __future__ import annotations

import socket
import threading


def free_udp() -> int:
    """A UDP port on 127.0.0.1 that nothing holds now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_in_thread(serve, *args, **kwargs) -> tuple[dict, threading.Thread]:
    """``serve(*args, ready=..., **kwargs)`` in a thread, returned once it listens: ``box["port"]`` its TCP
    port; when the thread ends, ``box["server"]`` its report (``{"error": ...}`` if it raised)."""
    box, started = {}, threading.Event()

    def ready(port):
        box["port"] = port
        started.set()

    def run():
        try:
            box["server"] = serve(*args, ready=ready, **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            box["server"] = {"error": repr(exc)}
            started.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10), f"{serve.__name__} did not listen within 10 s"
    return box, thread
