"""Thrift client for one running BMv2 ``simple_switch``: tables, counters, registers, mirroring, multicast,
egress queues.

Wraps BMv2's own Thrift stubs (``bm_runtime``, ``sswitch_runtime``) and reuses ``runtime_CLI``'s parsers
for match keys and action data, so entries use exactly the ``simple_switch_CLI`` syntax
(``10.0.0.0/8``, ``00:11:22:33:44:55``, ``0x10&&&0xf0``) and :class:`~testbed.p4rt.entries.TableEntry`
renders to the same text. Unlike the CLI, every failure raises :class:`P4RuntimeError` naming the switch
and the table instead of printing and carrying on.

``runtime_CLI`` keeps the loaded program in module globals; :meth:`SwitchClient._activate` reloads it
whenever another client (another program) used it last, so one process can drive fabric.p4 and
aggregation.p4 switches side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from testbed.errors import CapabilityError, TestbedError

try:  # BMv2's Python runtime (installed with BMv2, see /work/shared/p4tools)
    import runtime_CLI as _cli
    from bm_runtime.simple_pre_lag import SimplePreLAG
    from bm_runtime.standard import Standard
    from bm_runtime.standard.ttypes import BmAddEntryOptions
    from sswitch_runtime import SimpleSwitch
    from sswitch_runtime.ttypes import MirroringSessionConfig
    from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
    from thrift.transport import TSocket, TTransport
except ImportError:  # pragma: no cover - depends on the machine
    _cli = None

#: The client whose program runtime_CLI's globals currently describe.
_ACTIVE: list = [None]


class P4RuntimeError(TestbedError):
    """A Thrift call to a switch failed (bad entry, unknown table, switch gone)."""


@dataclass(frozen=True)
class CounterValue:
    packets: int
    bytes: int


def _need_runtime() -> None:
    if _cli is None:
        raise CapabilityError("BMv2 Python runtime (runtime_CLI, bm_runtime) not importable: "
                              "install BMv2 (sudo make setup)")


class SwitchClient:
    """Connection to one switch's Thrift server.

    Args:
        name: switch name, used in error messages.
        thrift_port: the switch's Thrift port on 127.0.0.1.
        timeout_s: socket timeout per call.
    """

    def __init__(self, name: str, thrift_port: int, host: str = "127.0.0.1", timeout_s: float = 10.0):
        _need_runtime()
        self.name = name
        self.thrift_port = thrift_port
        sock = TSocket.TSocket(host, thrift_port)
        sock.setTimeout(timeout_s * 1000)
        self._transport = TTransport.TBufferedTransport(sock)
        proto = TBinaryProtocol.TBinaryProtocol(self._transport)

        def mux(service):
            return TMultiplexedProtocol.TMultiplexedProtocol(proto, service)

        self.standard = Standard.Client(mux("standard"))
        self.mc = SimplePreLAG.Client(mux("simple_pre_lag"))
        self.sswitch = SimpleSwitch.Client(mux("simple_switch"))
        try:
            self._transport.open()
        except TTransport.TTransportException as exc:
            raise P4RuntimeError(f"switch {name}: cannot connect to Thrift port {thrift_port}: {exc}") from exc
        self._config = self._call("get config", self.standard.bm_get_config)
        self.program = json.loads(self._config)

    def close(self) -> None:
        self._transport.close()
        if _ACTIVE[0] is self:
            _ACTIVE[0] = None

    def __enter__(self) -> "SwitchClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------------
    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except TestbedError:
            raise
        except Exception as exc:  # noqa: BLE001 - Thrift raises many types; all mean "this call failed"
            detail = getattr(exc, "info", None) or getattr(exc, "message", None) or exc
            code = getattr(exc, "code", None)
            raise P4RuntimeError(f"switch {self.name}: {what} failed: {type(exc).__name__} "
                                 f"{detail}{'' if code is None else f' (code {code})'}") from exc

    def _activate(self) -> None:
        # switches running the same program share the parsed globals (re-parsing fabric.p4's JSON per
        # switch made every call that alternates between switches cost milliseconds)
        active = _ACTIVE[0]
        if active is not self and (active is None or active._config != self._config):
            _cli.load_json_str(self._config)
        _ACTIVE[0] = self

    def _table(self, name: str):
        self._activate()
        key = (_cli.ResType.table, name)
        if key not in _cli.SUFFIX_LOOKUP_MAP:
            raise P4RuntimeError(f"switch {self.name}: no table {name!r}; tables: "
                                 f"{', '.join(sorted(t.name for t in _cli.TABLES.values()))}")
        return _cli.SUFFIX_LOOKUP_MAP[key]

    def _action(self, table, action_name: str):
        action = table.get_action(action_name)
        if action is None:
            raise P4RuntimeError(f"switch {self.name}: table {table.name} has no action {action_name!r}")
        return action

    def _runtime_data(self, what: str, action, params):
        if len(params) != action.num_params():
            raise P4RuntimeError(f"switch {self.name}: {what}: action {action.name} takes "
                                 f"{action.num_params()} parameters, got {len(params)}")
        return self._call(what, _cli.parse_runtime_data, action, [str(p) for p in params])

    # -- tables ---------------------------------------------------------------------------------------
    def table_add(self, table: str, action: str, match, params=(), priority: int = 0) -> int:
        """Add an entry (CLI syntax for match fields and parameters); returns its handle."""
        t = self._table(table)
        a = self._action(t, action)
        what = f"table_add {table} {action} {' '.join(map(str, match))}"
        if len(match) != t.num_key_fields():
            raise P4RuntimeError(f"switch {self.name}: {what}: table needs {t.num_key_fields()} key fields")
        data = self._runtime_data(what, a, params)
        key = self._call(what, _cli.parse_match_key, t, [str(m) for m in match])
        return self._call(what, self.standard.bm_mt_add_entry, 0, t.name, key, a.name, data,
                          BmAddEntryOptions(priority=priority))

    def table_set_default(self, table: str, action: str, params=()) -> None:
        t = self._table(table)
        a = self._action(t, action)
        what = f"table_set_default {table} {action}"
        self._call(what, self.standard.bm_mt_set_default_action, 0, t.name, a.name,
                   self._runtime_data(what, a, params))

    def table_modify(self, table: str, action: str, handle: int, params=()) -> None:
        """Change the action data of the entry ``handle`` (its key stays; no miss in between)."""
        t = self._table(table)
        a = self._action(t, action)
        what = f"table_modify {table} {action} handle {handle}"
        self._call(what, self.standard.bm_mt_modify_entry, 0, t.name, int(handle), a.name,
                   self._runtime_data(what, a, params))

    def table_delete(self, table: str, handle: int) -> None:
        t = self._table(table)
        self._call(f"table_delete {table} handle {handle}", self.standard.bm_mt_delete_entry, 0, t.name,
                   int(handle))

    def send_writes(self, writes) -> list:
        """Send table writes without waiting for each answer: BMv2 serves one connection's requests in order,
        so the writes apply in the order given, and a batch costs about one round trip instead of one each.

        Args:
            writes: ``("add", table, action, match, params, priority)``, ``("modify", table, action, handle,
                params)`` or ``("delete", table, handle)``. Every one is parsed before anything is sent.

        Returns:
            What :meth:`recv_writes` needs to collect the answers (call it before any other call).
        """
        calls = []
        for w in writes:
            kind, table = w[0], w[1]
            t = self._table(table)
            if kind == "add":
                _, _, action, match, params, priority = w
                a = self._action(t, action)
                what = f"table_add {table} {action} {' '.join(map(str, match))}"
                if len(match) != t.num_key_fields():
                    raise P4RuntimeError(f"switch {self.name}: {what}: table needs {t.num_key_fields()} key fields")
                args = (0, t.name, self._call(what, _cli.parse_match_key, t, [str(m) for m in match]), a.name,
                        self._runtime_data(what, a, params), BmAddEntryOptions(priority=priority))
                calls.append((what, self.standard.send_bm_mt_add_entry, args, self.standard.recv_bm_mt_add_entry))
            elif kind == "modify":
                _, _, action, handle, params = w
                a = self._action(t, action)
                what = f"table_modify {table} {action} handle {handle}"
                args = (0, t.name, int(handle), a.name, self._runtime_data(what, a, params))
                calls.append((what, self.standard.send_bm_mt_modify_entry, args,
                              self.standard.recv_bm_mt_modify_entry))
            elif kind == "delete":
                what = f"table_delete {table} handle {w[2]}"
                calls.append((what, self.standard.send_bm_mt_delete_entry, (0, t.name, int(w[2])),
                              self.standard.recv_bm_mt_delete_entry))
            else:
                raise P4RuntimeError(f"switch {self.name}: unknown table write {kind!r}")
        sent = []
        for what, send, args, recv in calls:
            try:
                self._call(what, send, *args)
            except P4RuntimeError as exc:
                sent.append((what, exc))
                break  # the connection is broken: what was sent before still gets its answers
            sent.append((what, recv))
        return sent

    def recv_writes(self, sent) -> list:
        """The answers of :meth:`send_writes`, in order: a handle (add), None (modify, delete), or the
        :class:`P4RuntimeError` of a write that failed (the others are still read)."""
        out = []
        for what, recv in sent:
            if isinstance(recv, P4RuntimeError):
                out.append(recv)
                continue
            try:
                out.append(self._call(what, recv))
            except P4RuntimeError as exc:
                out.append(exc)
        return out

    def table_dump(self, table: str) -> list[tuple]:
        """Every entry of ``table`` as ``(match, action, params)`` in integers (an LPM field is ``(value,
        prefix length)``), sorted: what :func:`testbed.p4rt.incremental.normalized` gives for an entry, so a
        live switch can be compared with the program it should hold."""
        t = self._table(table)
        out = []
        for e in self._call(f"table_dump {table}", self.standard.bm_mt_get_entries, 0, t.name):
            match = []
            for m in e.match_key:
                if m.lpm is not None:
                    match.append((int.from_bytes(m.lpm.key, "big"), m.lpm.prefix_length))
                elif m.exact is not None:
                    match.append(int.from_bytes(m.exact.key, "big"))
                else:
                    raise P4RuntimeError(f"switch {self.name}: table_dump {table}: only exact and LPM keys are read")
            action = e.action_entry.action_name.rsplit(".", 1)[-1]
            out.append((tuple(match), action, tuple(int.from_bytes(d, "big") for d in e.action_entry.action_data)))
        return sorted(out)

    def table_clear(self, table: str) -> None:
        t = self._table(table)
        self._call(f"table_clear {table}", self.standard.bm_mt_clear_entries, 0, t.name, False)

    def table_num_entries(self, table: str) -> int:
        t = self._table(table)
        return self._call(f"table_num_entries {table}", self.standard.bm_mt_get_num_entries, 0, t.name)

    def apply(self, entries) -> list[int]:
        """Program a list of :class:`~testbed.p4rt.entries.TableEntry`; returns handles (None for defaults)."""
        handles = []
        for e in entries:
            if e.default:
                self.table_set_default(e.table, e.action, e.params)
                handles.append(None)
            else:
                handles.append(self.table_add(e.table, e.action, e.match, e.params, e.priority))
        return handles

    # -- counters and registers -----------------------------------------------------------------------
    def counter_read(self, name: str, index: int) -> CounterValue:
        self._activate()
        v = self._call(f"counter_read {name} {index}", self.standard.bm_counter_read, 0, name, index)
        return CounterValue(packets=v.packets, bytes=v.bytes)

    def counter_reset(self, name: str) -> None:
        self._call(f"counter_reset {name}", self.standard.bm_counter_reset_all, 0, name)

    def register_read(self, name: str, index: int) -> int:
        return self._call(f"register_read {name} {index}", self.standard.bm_register_read, 0, name, index)

    def register_read_all(self, name: str) -> list[int]:
        return list(self._call(f"register_read {name}", self.standard.bm_register_read_all, 0, name))

    def register_write(self, name: str, index: int, value: int) -> None:
        self._call(f"register_write {name} {index}", self.standard.bm_register_write, 0, name, index, value)

    def register_reset(self, name: str) -> None:
        self._call(f"register_reset {name}", self.standard.bm_register_reset, 0, name)

    # -- mirroring and multicast ----------------------------------------------------------------------
    def mirroring_add(self, session: int, port: int) -> None:
        """Clone session ``session`` sends its copies out of ``port``."""
        self._call(f"mirroring_add {session} {port}", self.sswitch.mirroring_session_add, session,
                   MirroringSessionConfig(port=port))

    def mc_group(self, group: int, ports, rid: int = 0) -> tuple[int, int]:
        """Create multicast group ``group`` replicating to ``ports``; returns (group handle, node handle)."""
        ports = sorted(int(p) for p in ports)
        port_map = "".join("1" if i in ports else "0" for i in range(max(ports, default=0) + 1))[::-1]
        grp = self._call(f"mc_mgrp_create {group}", self.mc.bm_mc_mgrp_create, 0, group)
        node = self._call(f"mc_node_create {rid} {ports}", self.mc.bm_mc_node_create, 0, rid, port_map, "")
        self._call(f"mc_node_associate {grp} {node}", self.mc.bm_mc_node_associate, 0, grp, node)
        return grp, node

    # -- egress queues --------------------------------------------------------------------------------
    def set_queue_depth(self, depth_pkts: int, port: int | None = None) -> None:
        """Egress queue depth in packets, of one port or (port None) all ports."""
        if port is None:
            self._call("set_queue_depth", self.sswitch.set_all_egress_queue_depths, int(depth_pkts))
        else:
            self._call(f"set_queue_depth {port}", self.sswitch.set_egress_queue_depth, int(port),
                       int(depth_pkts))

    def set_queue_rate(self, rate_pps: int, port: int | None = None) -> None:
        """Egress queue drain rate in packets/s, of one port or (port None) all ports."""
        if port is None:
            self._call("set_queue_rate", self.sswitch.set_all_egress_queue_rates, int(rate_pps))
        else:
            self._call(f"set_queue_rate {port}", self.sswitch.set_egress_queue_rate, int(port),
                       int(rate_pps))

    def time_elapsed_us(self) -> int:
        """The switch's clock (standard_metadata timestamps): microseconds since it started."""
        return self._call("get_time_elapsed", self.sswitch.get_time_elapsed_us)

    def time_since_epoch_us(self) -> int:
        """Wall-clock time now, as the switch sees it (with :meth:`time_elapsed_us`: its clock's origin)."""
        return self._call("get_time_since_epoch", self.sswitch.get_time_since_epoch_us)
