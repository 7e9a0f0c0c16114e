"""fabric.p4 state around one trial (root glue over :class:`~testbed.p4rt.client.SwitchClient`).

    program_ecn(clients, plan)      every port's ecn_config entry from the replica plan (RED, fast CNP)
    reset(clients)                  counters and registers to zero before a trial
    port_stats(client, port)        the congestion point's queue (peak, mean), marks, switch CNPs, first signal,
                                    PFC frames received and PAUSE/XON sent by the port
    drops(clients, plan)            every frame a switch lost, by reason, and the busiest switch's packets
                                    (frames a switch made itself: fast CNPs, PFC PAUSE/XON; consumed: MAC Control)
    QueueSampler(client, port)      the congestion point's queue over time, read while the trial runs
    queue_series(samples)           (pure) those readings as the depth over time

Counters and registers are those of ``p4/fabric.p4`` (``docs/p4.md``).
"""

from __future__ import annotations

from testbed.p4rt import entries as E

COUNTERS = ("marks", "cnps", "drops", "cnp_skipped", "to_port", "from_queue", *E.PFC_COUNTERS)
REGISTERS = ("sender_qp", "cnp_last_us", "qdepth_last", "qdepth_peak", "qdepth_sum", "qdepth_pkts", "first_signal_us",
             "pfc_bytes", "pfc_paused_at", "pfc_egress_held", "pfc_xon_owed")


def program_ecn(clients: dict, plan) -> None:
    """Replace every switch's ``ecn_config`` with the plan's per-port entries."""
    for sw, c in clients.items():
        c.table_clear("ecn_config")
        for p in plan.switch(sw).ports:
            c.apply(E.ecn_entries(E.ecn_config(p.ecn), port=p.port))


def reset(clients: dict) -> None:
    for c in clients.values():
        for name in COUNTERS:
            c.counter_reset(name)
        for name in REGISTERS:
            c.register_reset(name)


def clock_epoch_us(client, tries: int = 5) -> int:
    """Wall time (us since the epoch) of the switch's clock zero: switch timestamps + this = wall time.

    The switch's wall clock and its elapsed clock are two Thrift calls; on a loaded machine tens of ms can
    pass between them. Each try brackets the wall reading between two elapsed readings and the tightest
    bracket's midpoint is taken, so the error is at most half of the best round trip.
    """
    best = None
    for _ in range(tries):
        before = client.time_elapsed_us()
        wall = client.time_since_epoch_us()
        after = client.time_elapsed_us()
        if best is None or after - before < best[0]:
            best = (after - before, wall - (before + after) // 2)
    return best[1]


def port_stats(client, port: int) -> dict:
    pkts = client.register_read("qdepth_pkts", port)
    return {"queue_peak": client.register_read("qdepth_peak", port),
            "queue_mean": round(client.register_read("qdepth_sum", port) / pkts, 1) if pkts else 0.0,
            "marks": client.counter_read("marks", port).packets,
            "switch_cnps": client.counter_read("cnps", port).packets,
            "cnp_skipped": {k: client.counter_read("cnp_skipped", i).packets for k, i in E.CNP_SKIP_REASONS.items()},
            "first_signal_us": client.register_read("first_signal_us", port),
            **{name: client.counter_read(name, port).packets for name in E.PFC_COUNTERS}}


def drops(clients: dict, plan) -> dict:
    """``tail`` (queued minus dequeued, per port), ``red`` (early drops), ``by_switch`` (every reason),
    ``counted`` (all but not-IP), ``busiest_pkts`` (the most any one switch dequeued), and per switch
    ``consumed_by_switch`` (tail + every reason + MAC Control frames received) and ``generated_by_switch``
    (its fast CNPs and PFC PAUSE/XON frames; ``cnps_by_switch``: the CNPs alone, frames of the flows);
    ``marks_by_port`` {switch: {port: CE marks}} wherever a port marked (a second congestion point shows
    here); ``pfc_by_switch`` {switch: {pfc_rx, pfc_pause_sent, pfc_xon_sent}} summed over its ports.

    A PFC frame is a frame on the wire like any other: the hop ledger (testbed.links.hops) needs the ones a
    switch sent among what it generated and the ones it received among what it consumed."""
    tail = busiest = 0
    tail_by_switch, generated, cnps, sent_to, left_queue, marks, pfc = {}, {}, {}, {}, {}, {}, {}
    for sw, c in clients.items():
        ports = [p.port for p in plan.switch(sw).ports]
        dequeued = {p: c.counter_read("from_queue", p).packets for p in ports}
        queued = {p: c.counter_read("to_port", p).packets for p in ports}
        sent_to[sw], left_queue[sw] = sum(queued.values()), sum(dequeued.values())
        tail_by_switch[sw] = sum(max(0, queued[p] - dequeued[p]) for p in ports)
        tail += tail_by_switch[sw]
        busiest = max(busiest, sum(dequeued.values()))
        pfc[sw] = {name: sum(c.counter_read(name, p).packets for p in ports) for name in E.PFC_COUNTERS}
        cnps[sw] = sum(c.counter_read("cnps", p).packets for p in ports)
        generated[sw] = cnps[sw] + pfc[sw]["pfc_pause_sent"] + pfc[sw]["pfc_xon_sent"]
        marked = {p: c.counter_read("marks", p).packets for p in ports}
        marks[sw] = {p: n for p, n in marked.items() if n}
    by_switch = {sw: {k: c.counter_read("drops", i).packets for k, i in E.DROP_REASONS.items()}
                 for sw, c in clients.items()}
    red = sum(d["queue"] for d in by_switch.values())
    counted = tail + sum(n for d in by_switch.values() for k, n in d.items() if k != "not_ip")
    # per switch, every frame it consumed itself (all reasons, not-IP included, its full queues and the MAC
    # Control frames it received) and every frame it made (fast CNPs, PFC PAUSE/XON): what closes its
    # balance in testbed.links.hops
    consumed = {sw: tail_by_switch[sw] + sum(by_switch[sw].values()) + pfc[sw]["pfc_rx"] for sw in clients}
    # what the pipeline saw: ingress = routed + dropped in ingress + MAC Control consumed;
    # egress out = dequeued - early drops + CNPs and PFC frames
    pipeline = {sw: {"ingress": sent_to[sw] + sum(n for k, n in by_switch[sw].items() if k != "queue")
                     + pfc[sw]["pfc_rx"],
                     "egress": left_queue[sw] - by_switch[sw]["queue"] + generated[sw]} for sw in clients}
    return {"pipeline_by_switch": pipeline, "tail": tail, "red": red, "by_switch": by_switch, "counted": counted, "busiest_pkts": busiest,
            "consumed_by_switch": consumed, "generated_by_switch": generated, "cnps_by_switch": cnps,
            "marks_by_port": {sw: m for sw, m in marks.items() if m}, "pfc_by_switch": pfc}


def queue_series(samples) -> list[tuple[float, int | None]]:
    """Pure: ``(wall_s, qdepth_last, qdepth_pkts)`` readings -> ``(wall_s, depth)``, the depth the port's
    latest packet met (fabric.p4's ``qdepth_last``), or None when no packet entered the queue since the
    reading before (the register still holds an old packet's depth: a gap, not the queue now).

    Why not the mean from ``qdepth_sum`` / ``qdepth_pkts``: the two are read by separate Thrift calls, and
    a packet counted in one but not yet in the other makes an interval with few packets read thousands of
    frames deep (6,225 against a 362-frame peak, once).
    """
    out = []
    for (_t0, _q0, n0), (t1, q1, n1) in zip(samples, samples[1:], strict=False):
        out.append((t1, q1 if n1 != n0 else None))
    return out


class QueueSampler:
    """Reads one port's queue registers every ``every_s`` on a thread of its own, with its own Thrift client
    (``connect()``: a fresh :class:`SwitchClient`; the trial's clients stay on the caller's thread).

    Each reading costs two register reads; at the long haul's 50 ms (emulated) that is 40 Thrift calls a
    second, next to BMv2's thousands of packets.
    """

    def __init__(self, connect, port: int, every_s: float):
        import threading

        self.connect, self.port, self.every_s = connect, port, every_s
        self.samples: list[tuple[float, int, int]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"queue-sampler-{port}", daemon=True)

    def _run(self) -> None:
        import time

        try:
            client = self.connect()
        except Exception as exc:  # noqa: BLE001 - reported with the series, never fatal to the trial
            self.error = f"cannot connect: {exc}"
            return
        try:
            while not self._stop.is_set():
                t = time.time()
                self.samples.append((t, client.register_read("qdepth_last", self.port),
                                     client.register_read("qdepth_pkts", self.port)))
                self._stop.wait(max(0.0, t + self.every_s - time.time()))
        except Exception as exc:  # noqa: BLE001
            self.error = f"stopped reading: {exc}"
        finally:
            client.close()

    def start(self) -> "QueueSampler":
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, float | None]]:
        """Stop reading; the depth over time (:func:`queue_series`)."""
        self._stop.set()
        self._thread.join(timeout=10)
        return queue_series(self.samples)
