"""The controller process against fake OpenFlow switches (no root, no Mininet): bad input never kills it,
the status API reports it healthy, and nothing listens beyond 127.0.0.1."""

from __future__ import annotations

import random
import socket
import struct

import psutil
import pytest

from controllers.launch import start_controller
from testbed.poll import poll
from testbed.topo import addressing
from testbed.topo import generators as gen

OFP13 = 4


def _msg(msg_type: int, body: bytes = b"", xid: int = 0) -> bytes:
    return struct.pack("!BBHI", OFP13, msg_type, 8 + len(body), xid) + body


def _packet_in(in_port: int, data: bytes) -> bytes:
    match = struct.pack("!HHII", 1, 12, 0x80000004, in_port) + b"\0" * 4  # OXM in_port, padded to 8
    body = struct.pack("!IHBBQ", 0xFFFFFFFF, len(data), 0, 0, 0) + match + b"\0\0" + data
    return _msg(10, body)


class FakeSwitch:
    """Speaks just enough OpenFlow 1.3 to be accepted: hello, features, port-desc, echo."""

    def __init__(self, port: int, dpid: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.dpid = dpid
        self.buf = b""
        self.sock.sendall(_msg(0))  # HELLO

    def _read_msg(self):
        while len(self.buf) < 8 or len(self.buf) < struct.unpack("!H", self.buf[2:4])[0]:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        length = struct.unpack("!H", self.buf[2:4])[0]
        msg, self.buf = self.buf[:length], self.buf[length:]
        return msg

    def serve_until_main(self):
        """Answer the controller until it asked for port descriptions (it is then in MAIN state)."""
        while True:
            msg = self._read_msg()
            assert msg is not None, "controller closed the connection"
            _, mtype, _, xid = struct.unpack("!BBHI", msg[:8])
            if mtype == 5:  # FEATURES_REQUEST
                self.sock.sendall(_msg(6, struct.pack("!QIBB2xII", self.dpid, 0, 2, 0, 0, 0), xid))
            elif mtype == 2:  # ECHO_REQUEST
                self.sock.sendall(_msg(3, msg[8:], xid))
            elif mtype == 18 and struct.unpack("!H", msg[8:10])[0] == 13:  # MULTIPART port desc
                self.sock.sendall(_msg(19, struct.pack("!HH4x", 13, 0), xid))
                return

    def send(self, data: bytes):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    G = addressing.assign(gen.fat_tree(4))
    ctl = start_controller(None, G, tmp_path_factory.mktemp("ctl"), lldp_interval=0)
    yield G, ctl
    ctl.stop()


def test_listens_on_loopback_only(controller):
    _, ctl = controller
    listening = [c for c in psutil.Process(ctl.proc.pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert {c.laddr.port for c in listening} >= {ctl.of_port, ctl.api_port}
    assert all(c.laddr.ip == "127.0.0.1" for c in listening)


def test_unknown_datapath_and_fuzzed_packet_ins_do_not_kill_it(controller):
    G, ctl = controller
    rng = random.Random(11)
    stranger = FakeSwitch(ctl.of_port, 0xDEADBEEF)
    stranger.serve_until_main()
    known = FakeSwitch(ctl.of_port, G.nodes["t0"]["dpid"])
    known.serve_until_main()
    before = ctl.get("/health")["packet_ins"]
    for sw in (stranger, known):
        for n in range(60):
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 120)))
            if n % 2:
                data = b"\xff" * 6 + b"\x02" * 6 + rng.choice([b"\x08\x06", b"\x88\xcc"]) + data
            sw.send(_packet_in(rng.randrange(1, 8), data))
    poll(lambda: ctl.get("/health")["packet_ins"] >= before + 120, timeout=20, what="packet-ins to be handled")
    # a packet-in with a broken match, and plain garbage on a third connection
    known.send(_msg(10, b"\x00" * 7))
    garbage = socket.create_connection(("127.0.0.1", ctl.of_port), timeout=5)
    garbage.sendall(bytes(rng.randrange(256) for _ in range(500)))
    garbage.close()
    health = poll(lambda: ctl.get("/health"), timeout=10, what="controller API")
    assert ctl.alive() and health["status"] == "ok"
    assert 0xDEADBEEF in health["unknown_datapaths"]
    assert health["switches_connected"] == 1
    # and it still does its job for the known switch
    assert ctl.get("/paths", src="h0", dst="h15")["equal_cost"] == 4
    for sw in (stranger, known):
        sw.close()


def test_api_rejects_bad_requests_without_dying(controller):
    _, ctl = controller
    from controllers.launch import ApiError

    with pytest.raises(ApiError, match="400"):
        ctl.get("/paths", src="h0", dst="nope")
    with pytest.raises(ApiError, match="404"):
        ctl.get("/nothing")
    with pytest.raises(ApiError, match="400"):
        ctl.post("/fail/link", a="h0", b="h9")
    assert ctl.get("/health")["status"] == "ok"
