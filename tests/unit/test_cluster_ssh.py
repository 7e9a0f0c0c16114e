"""SSH to the workers (paramiko client against paramiko's server side on 127.0.0.1, no root): the host-key
policy (unknown refused, accept-new records, changed always refused), key-only auth (no password tried),
one-line errors, and a bad worker stopping the start before anything runs anywhere. The whole
orchestration over the same server is in tests/integration/test_cluster_orchestration.py (a few seconds per run)."""

from __future__ import annotations

import socket

import paramiko
import pytest

from testbed.cluster.coordinator import Cluster
from testbed.cluster.ssh import SshError, SshOptions, connect
from testbed.errors import SpecError
from testbed.topo.spec import resolve_spec
from testbed.topo.workers import WorkerSpec
from tests.unit.sshd_stub import USER, Listener, SshdStub, known_hosts, new_client_key, worker


@pytest.fixture(scope="module")
def client_key(tmp_path_factory):
    return new_client_key(tmp_path_factory.mktemp("keys"))


# -- host keys and authentication -------------------------------------------------------------------------
def test_unknown_host_key_is_refused_and_not_recorded(tmp_path, client_key):
    with SshdStub(USER, client_key[0]) as sshd:
        kh = tmp_path / "known_hosts"
        with pytest.raises(SpecError) as err:
            connect(worker(sshd, "10.99.0.1"), SshOptions(known_hosts=str(kh), identity=str(client_key[1])))
        assert "unknown host key" in str(err.value) and "--accept-new-host-keys" in str(err.value)
        assert f"127.0.0.1:{sshd.port}" in str(err.value)
        assert not kh.exists()
        assert sshd.commands == []


def test_accept_new_records_the_key_then_strict_accepts_it(tmp_path, client_key):
    with SshdStub(USER, client_key[0]) as sshd:
        kh = tmp_path / "known_hosts"
        opts = SshOptions(known_hosts=str(kh), identity=str(client_key[1]), accept_new=True)
        connect(worker(sshd, "10.99.0.1"), opts).close()
        line = kh.read_text()
        assert line.split() == sshd.known_hosts_line().split()
        assert oct(kh.stat().st_mode & 0o777) == "0o600"
        conn = connect(worker(sshd, "10.99.0.1"), SshOptions(known_hosts=str(kh), identity=str(client_key[1])))
        assert conn.check("echo hello").strip() == b"hello"
        conn.close()


def test_changed_host_key_is_refused_even_with_accept_new(tmp_path, client_key):
    with SshdStub(USER, client_key[0]) as sshd:
        kh = tmp_path / "known_hosts"
        other = paramiko.ECDSAKey.generate()
        kh.write_text(f"[127.0.0.1]:{sshd.port} {other.get_name()} {other.get_base64()}\n")
        before = kh.read_text()
        with pytest.raises(SpecError) as err:
            connect(worker(sshd, "10.99.0.1"),
                    SshOptions(known_hosts=str(kh), identity=str(client_key[1]), accept_new=True))
        assert "host key differs" in str(err.value) and "ssh-keygen -R" in str(err.value)
        assert kh.read_text() == before
        assert sshd.commands == []


def test_wrong_key_is_refused_and_no_password_is_tried(tmp_path, client_key):
    with SshdStub(USER, paramiko.ECDSAKey.generate()) as sshd:   # authorizes another key
        with pytest.raises(SpecError) as err:
            connect(worker(sshd, "10.99.0.1"),
                    SshOptions(known_hosts=str(known_hosts(tmp_path, sshd)), identity=str(client_key[1])))
        assert "key authentication refused" in str(err.value)
        assert sshd.password_attempts == 0


def test_unreachable_worker_is_one_line(tmp_path, client_key):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()   # nothing listens there now
    with pytest.raises(SshError) as err:
        connect(WorkerSpec(USER, "127.0.0.1", port, "10.99.0.1"), SshOptions(known_hosts=str(tmp_path / "kh")))
    assert f"{USER}@127.0.0.1:{port}" in str(err.value) and "\n" not in str(err.value)


def test_a_bad_second_worker_starts_nothing_on_the_first(tmp_path, client_key):
    with SshdStub(USER, client_key[0]) as good, SshdStub(USER, client_key[0]) as unknown:
        kh = known_hosts(tmp_path, good)     # the second worker's key is not known
        lst = Listener()
        cl = Cluster(resolve_spec("fat-tree-k4"), [worker(good, "10.99.0.1"), worker(unknown, "10.99.0.2")],
                     tmp_path / "out", ssh=SshOptions(known_hosts=str(kh), identity=str(client_key[1])),
                     dry_run=True, controller=("127.0.0.1", lst.port))
        with pytest.raises(SpecError) as err:
            with cl:
                pass
        assert "cluster.workers[1]" in str(err.value)
        assert good.commands == [] and unknown.commands == []




def test_cli_bad_input_is_one_line_exit_2(capsys):
    from testbed.cli import main

    for argv, field in ((["cluster", "run", "fat-tree-k4", "--dry-run"], "--workers"),
                        (["cluster", "run", "fat-tree-k4", "--dry-run", "--workers", "h1"], "--workers[0]"),
                        (["cluster", "run", "fat-tree-k4", "--dry-run", "--workers", "root@h1,root@h2",
                          "--underlay", "10.0.0.1"], "--underlay"),
                        (["cluster", "run", "fat-tree-k4", "--dry-run", "--workers", "root@h1"],
                         "cluster.workers[0].underlay"),
                        (["cluster", "plan", "fat-tree-k4", "--workers", "99"], "--workers")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and field in err, (argv, err)
