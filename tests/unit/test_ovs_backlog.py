"""ovs-vswitchd's receive backlog (testbed.emu.ovsbacklog) and the collective runner's saturation verdict on it."""

from testbed.collective.runner import ovs_behind
from testbed.emu.ovsbacklog import BEHIND_BYTES, receive_backlog

PACKET = """sk               RefCnt Type Proto  Iface R Rmem   User   Inode
00000000cdc27587 2      3    0000   0     0 0      0      100
00000000aaaaaaaa 3      3    0003   17    1 4608   0      101
00000000bbbbbbbb 3      3    0003   18    1 2304   0      102
00000000cccccccc 3      3    0003   19    1 9999   0      555
"""


def test_backlog_sums_the_port_sockets_of_the_process_only():
    # 100: OVS's send socket (Iface 0); 555: someone else's capture socket on a port
    assert receive_backlog(PACKET, {100, 101, 102}) == 4608 + 2304
    assert receive_backlog(PACKET, {100}) == 0
    assert receive_backlog(PACKET.splitlines()[0], {101}) == 0


def backlog(peak):
    return {"max_bytes": peak, "mean_bytes": peak // 2, "samples": 10, "behind": peak > BEHIND_BYTES}


def test_a_busy_ovs_that_keeps_up_is_not_saturated():
    assert ovs_behind({"switch_max": 98, "ovs_backlog": backlog(16_128)}) == []


def test_a_busy_ovs_with_frames_waiting_is_saturated_and_says_how_many():
    why = ovs_behind({"switch_max": 95, "ovs_backlog": backlog(BEHIND_BYTES + 1)})
    assert len(why) == 1 and "95% of a core" in why[0] and f"{BEHIND_BYTES + 1:,} B waiting" in why[0]


def test_a_backlog_with_cpu_to_spare_is_not_blamed_on_ovs():
    """Two jobs together: OVS batches more (52% of a core) and leaves more waiting between its wake-ups."""
    assert ovs_behind({"switch_max": 52, "ovs_backlog": backlog(119_168)}) == []


def test_without_a_backlog_reading_the_cpu_alone_decides():
    assert ovs_behind({"switch_max": 91, "ovs_backlog": None}) == ["ovs-vswitchd at 91% of a core"]
    assert ovs_behind({"switch_max": 10}) == []
