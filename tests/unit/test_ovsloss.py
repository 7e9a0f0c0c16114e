"""testbed.emu.ovsloss on text captured on this machine (Debian 12, kernel 6.18, OVS 3.1.0) during an
8-rank all-to-all on fat-tree-k4 (tests/data/ovsloss/)."""

from pathlib import Path

from testbed.collective import report
from testbed.emu import ovsloss

DATA = Path(__file__).parent.parent / "data" / "ovsloss"

# `ss -0 -m -p -H` lines as captured: ovs-vswitchd's send socket ([0]:*), two of its port sockets, and a
# link node's socket (another process); the d<N> of the port sockets set to non-zero values and the send
# socket's t<N> to the 202,048 B sampled mid-run
SS = """\
p_raw 0      0      [0]:*        * users:(("ovs-vswitchd",pid=12323,fd=200)) skmem:(r0,rb212992,t202048,tb212992,f0,w0,o0,bl0,d0)
p_raw 0      0        *:cr3-eth4 * users:(("ovs-vswitchd",pid=12323,fd=40)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o176,bl0,d17)
p_raw 0      0        *:cr3-eth2 * users:(("ovs-vswitchd",pid=12323,fd=41)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o176,bl0,d5)
p_raw 0      0        *:dl1-eth1 * users:(("linkcore-a0c087",pid=16669,fd=3)) skmem:(r0,rb16777216,t0,tb16777216,f0,w0,o0,bl0,d40)
"""


def test_softnet_dropped_reads_the_second_column_in_hex():
    text = (DATA / "softnet_stat.txt").read_text()
    assert ovsloss.softnet_dropped(text) == 0        # the third column (time_squeeze: 7 and 1) is not a drop
    cpu1 = text.splitlines()[1].split()
    cpu1[1] = "0000001f"
    assert ovsloss.softnet_dropped(text.splitlines()[0] + "\n" + " ".join(cpu1)) == 31
    assert ovsloss.softnet_dropped("") == 0


def test_port_socket_drops_are_per_port_of_one_process():
    assert ovsloss.port_socket_drops(SS, 12323, {"cr3-eth4", "cr3-eth2", "dl1-eth1"}) == {"cr3-eth4": 17,
                                                                                         "cr3-eth2": 5}
    assert ovsloss.port_socket_drops(SS, 12323, {"cr3-eth2"}) == {"cr3-eth2": 5}    # another replica's port: no
    assert ovsloss.port_socket_drops(SS, 16669, {"dl1-eth1"}) == {"dl1-eth1": 40}
    assert ovsloss.port_socket_drops(SS, 1, {"cr3-eth4"}) == {}


def test_send_socket_is_the_unbound_one():
    assert ovsloss.send_socket(SS, 12323) == {"wmem": 202048, "sndbuf": 212992}
    # while --ovs-send-buffer holds a copy, ss lists both owners, the copy's holder first
    shared = SS.replace('users:(("ovs-vswitchd",pid=12323,fd=200))',
                        'users:(("python3",pid=777,fd=9),("ovs-vswitchd",pid=12323,fd=200))', 1)
    assert shared != SS and ovsloss.send_socket(shared, 12323) == {"wmem": 202048, "sndbuf": 212992}
    assert ovsloss.send_socket(SS, 16669) is None
    assert ovsloss.send_socket("", 12323) is None


def test_port_frames_sum_the_ports_and_their_root_queues():
    link, qdisc = (DATA / "ip-link.json").read_text(), (DATA / "tc-qdisc.json").read_text()
    # t0-eth1: rx 1223, tx 1083; t0-eth3: rx 502, tx 1181; lo is not a port; the pfifo under t0-eth1's HTB
    # is inside the root's figures
    assert ovsloss.port_frames(link, qdisc, {"t0-eth1", "t0-eth3"}) == {"rx": 1725, "tx": 2264, "queue_drops": 0,
                                                                       "backlog": 0}
    assert ovsloss.port_frames(link, qdisc, {"t0-eth3"})["rx"] == 502


def _snap(rx, tx, queue_drops, backlog, sockets, softnet, edge=(0, 0)):
    return {"ports": {"rx": rx, "tx": tx, "queue_drops": queue_drops, "backlog": backlog},
            "edge": {"rx": edge[0], "tx": edge[1], "queue_drops": 0, "backlog": 0},
            "port_sockets": sockets, "send_socket": None, "softnet_dropped": softnet}


def test_losses_infer_the_send_socket_by_conservation():
    before = _snap(100, 90, 1, 5, {"t0-eth1": 2}, 3, edge=(40, 30))
    after = _snap(1100, 1000, 3, 0, {"t0-eth1": 4, "t0-eth2": 1}, 3, edge=(440, 400))
    # read 1000 - 3 (port sockets) = 997; queued 910 + 2 (queue drops) - 5 (backlog drained) = 907: 90
    # vanished between reading and queueing
    assert ovsloss.losses(before, after) == {"ovs_send_socket": 90, "ovs_port_sockets": 3}
    assert ovsloss.edge_frames(before, after) == {"in": 400, "out": 370}


def test_ledger_attributes_the_emulators_losses():
    reps = [{"stats": {"tx_packets": 600, "rx_packets": 500, "device": {}}},
            {"stats": {"tx_packets": 400, "rx_packets": 400, "device": {"tx_enobufs": 2}}}]
    led = report.loss_ledger(reps, counted=8, emulator={"ovs_send_socket": 86, "ovs_port_sockets": 3}, rcvbuf=1)
    assert led["lost"] == 100 and led["emulator_lost"] == 89
    assert led["unattributed"] == 100 - 8 - 2 - 1 - 89 and led["beyond"] == 0
    # a learning bridge's floods make the inference negative: it names nothing then, it takes nothing off
    assert report.loss_ledger(reps, counted=8, emulator={"ovs_send_socket": -83})["unattributed"] == 100 - 8 - 2
    over = report.loss_ledger(reps, counted=8, emulator={"ovs_send_socket": 95})
    assert over["unattributed"] == 0 and over["beyond"] == 5
    assert report.loss_ledger(reps, counted=0)["unattributed"] == 98


def test_ledger_takes_the_hosts_own_lost_frames_off():
    reps = [{"stats": {"tx_packets": 1000, "rx_packets": 900, "device": {"tx_enobufs": 2}}}]
    # 998 of the ranks' frames reached the fabric with 15 of the hosts' own (ARP, IPv6); 900 of theirs and
    # 13 of the hosts' came out (as in the 8-rank all-to-all of docs/collectives.md: 15 in, 13 out): the
    # fabric lost 100 frames, 2 of them not the ranks'
    edge = {"in": 998 + 15, "out": 900 + 13}
    led = report.loss_ledger(reps, counted=0, emulator={"ovs_send_socket": 100}, edge=edge)
    assert led["others_lost"] == 2 and led["unattributed"] == 0 and led["beyond"] == 0
    assert report.loss_ledger(reps, counted=0, emulator={"ovs_send_socket": 100})["beyond"] == 2
    # a datagram the receiving host's socket dropped came out of the fabric but is not another frame
    led = report.loss_ledger(reps, counted=0, emulator={"ovs_send_socket": 99}, edge={"in": 1013, "out": 914},
                             rcvbuf=1)
    assert led["others_lost"] == 2 and led["unattributed"] == 0 and led["beyond"] == 0


def test_the_reason_counts_the_ranks_frames_lost_inside_the_emulator():
    frames, why = report.inside_emulator({"ovs_send_socket": 1002, "ovs_port_sockets": 0}, 3, ovsloss.ENTRIES)
    assert frames == 999 and why.startswith("999 frames lost inside the emulator: 1002 read by ovs-vswitchd")
    assert why.endswith("(less 3 of the hosts' own frames)")
    # a 4 MiB send buffer: no rank's frame lost, one IPv6 frame of a host dropped by the pipeline
    assert report.inside_emulator({"ovs_send_socket": 1, "ovs_port_sockets": 0}, 1, ovsloss.ENTRIES) == (0, None)
    assert report.inside_emulator({"ovs_send_socket": -83}, 0, ovsloss.ENTRIES) == (0, None)
