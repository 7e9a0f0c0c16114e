"""RoCEv2 on the wire (pure; no root).

* :mod:`.opcodes`  BTH opcodes and the extended headers each carries (IBA Table 38), as data.
* :mod:`.icrc`     the invariant CRC over IPv4/IPv6 + UDP + BTH.. (IBA §7.8.1, Annex A17.4.5), on bytes.
* :mod:`.layers`   Scapy layers: BTH with ICRC, RETH, DETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH,
                   CNP; factories ``cnp(dqpn)``, ``ack(...)``.
* :mod:`.capture`  pcap/pcapng records -> RoCE packets, without Scapy (fast, never raises on junk).
* :mod:`.check`    the per-QP validator behind ``testbed roce check``.
* :mod:`.craft`    RC messages and fuzzed packets for tests.
"""
