"""CNP arrival times from a capture: every CNP's timestamp, in order, and the first."""

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from testbed.roce.layers import ack, cnp
from testbed.roce.timing import destinations, first_opcode_time, opcode_times


def _frame(payload, t: float):
    f = Ether() / IP(src="10.0.0.2", dst="10.0.0.1") / UDP(sport=49152, dport=4791) / payload
    f.time = t
    return f


def test_every_cnp_time_and_only_cnps(tmp_path):
    pcap = tmp_path / "cnp.pcap"
    wrpcap(str(pcap), [_frame(ack(7, 1, 1), 1.0), _frame(cnp(7), 2.25), _frame(ack(7, 2, 2), 2.5),
                       _frame(cnp(7), 3.5)])
    times, why = opcode_times(pcap)
    assert why is None and times == [2.25, 3.5]
    assert first_opcode_time(pcap) == (2.25, None)


def test_no_cnp_is_an_empty_list_and_no_first(tmp_path):
    pcap = tmp_path / "acks.pcap"
    wrpcap(str(pcap), [_frame(ack(7, 1, 1), 1.0)])
    assert opcode_times(pcap) == ([], None)
    assert first_opcode_time(pcap) == (None, None)


def test_cnps_addressed_to_given_hosts_only(tmp_path):
    pcap = tmp_path / "signal.pcap"
    other = Ether() / IP(src="10.0.0.2", dst="10.0.0.9") / UDP(sport=49152, dport=4791) / cnp(8)
    other.time = 1.0
    wrpcap(str(pcap), [other, _frame(cnp(7), 2.0), _frame(ack(7, 1, 1), 2.5)])
    assert opcode_times(pcap, to=frozenset({"10.0.0.1"})) == ([2.0], None)
    assert opcode_times(pcap)[0] == [1.0, 2.0]
    assert destinations(pcap) == {"10.0.0.1", "10.0.0.9"} and destinations(pcap, None) == {"10.0.0.1", "10.0.0.9"}
