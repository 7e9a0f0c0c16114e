"""Emulator health verdicts (testbed.emu.health): when a trial's limit was the emulator, not the protocol."""

from __future__ import annotations

from testbed.emu import health


def test_udp_rcvbuf_errors_parses_proc_net_snmp():
    text = ("Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n"
            "Udp: 10 0 3 9 2 0\n")
    assert health.udp_rcvbuf_errors(text) == 2
    assert health.udp_rcvbuf_errors("") == 0


def test_packet_socket_drops_sums_only_our_switches():
    text = ('p_raw 0 0 *:s1-eth1 * users:(("simple_switch_f",pid=11,fd=10)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d7)\n'
            'p_raw 0 0 *:s1-eth2 * users:(("simple_switch_f",pid=11,fd=12)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d2)\n'
            'p_raw 0 0 *:agS1 * users:(("simple_switch_f",pid=99,fd=10)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d50)\n')
    assert health.packet_socket_drops(text, [11]) == 9
    assert health.packet_socket_drops(text, [11, 99]) == 59
    assert health.packet_socket_drops("", [11]) == 0
    assert health.saturation({}, None, 0, 15000, switch_socket_drops=1)


def test_losses_no_switch_counted_are_the_emulators():
    assert health.saturation({}, None, 0, 15000, unexplained_gaps=0) == []
    assert "outside the switch pipelines" in health.saturation({}, None, 0, 15000, unexplained_gaps=3)[0]


def test_a_trial_without_a_delay_line_is_distrusted_when_the_timers_stalled():
    stalled = {"timers": {"policy": "SCHED_FIFO 20", "stalled_fraction": 0.03}}
    (reason,) = health.saturation(stalled, None, 0, 15000)
    assert reason.startswith("timers stalled 3.0% of the run")
    # the same assess() says it once: the trial's reasons carry it, the run's block does not repeat it
    from testbed.emu.runhealth import assess

    assert assess(cpu=stalled, reasons=[reason])["emulator"]["reasons"] == [reason]
    line = {"directions": {"a>b": {"tx_packets": 1000, "mean_late_lateness_s": 0.0}}, "emulator_late": 0,
            "params": {"delay_s": 0.15}}
    assert health.saturation(stalled, line, 0, 15000) == []      # a delay line measures its own lateness
    assert health.saturation({"timers": {"policy": "SCHED_FIFO 20", "stalled_fraction": 0.002}}, None, 0, 15000) == []
