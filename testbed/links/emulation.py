"""Per-edge link emulation for fabric replicas: decide (pure), then insert a delay line or run tc (glue).

For every edge the decision is one of::

    nothing    no rate, no delay, no loss                      plain veth
    htb        rate only                                       tc HTB on both ends' egress
    kernel     delay/jitter/loss/RED and the kernel has netem  tc netem -> tbf -> red on both ends
    userspace  delay/jitter/loss/RED, no netem (this machine)  a DelayLineNode inserted on the edge

The replica hands us real-world edge attributes (``rate_bps``, ``delay_s``, ``distance_m``,
``link``: :class:`LinkParams` from the spec's ``link:`` block); they are time-dilated here with the
replica's :class:`~testbed.dilation.Dilation`. Usage::

    links = LinkEmulation(dilation, out_dir=res.dir)
    with Replica(G, dilation=dilation, **links.replica_hooks()) as rep:
        rep.link_node("dci1", "dci2").stats()      # delay-line counters of a userspace link

Delays below ``min_delay_s`` (emulated) are not worth a delay line (it adds ~0.1 ms itself): such
edges are treated as rate-only and the decision records the ignored delay.
"""

from __future__ import annotations

import subprocess
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

from testbed.dilation import Dilation
from testbed.errors import EmulationError
from testbed.links import tc
from testbed.links.model import LinkParams

#: Emulated delays below this are below the delay line's own latency and are not emulated.
DEFAULT_MIN_DELAY_S = 100e-6


@dataclass(frozen=True)
class LinkDecision:
    """How one edge is emulated. ``params`` are the emulated (dilated) ones."""

    backend: str                 # nothing | htb | kernel | userspace
    params: LinkParams
    ignored_delay_s: float = 0.0


def edge_params(attrs: dict) -> LinkParams:
    """Real-world parameters of an edge: its ``link`` block, rate/delay/distance filling the gaps."""
    base = attrs.get("link") or LinkParams()
    if not isinstance(base, LinkParams):
        raise EmulationError(f"edge attribute 'link' must be a LinkParams, got {type(base).__name__}")
    return base.with_defaults(rate_bps=attrs.get("rate_bps"), delay_s=attrs.get("delay_s"),
                              distance_m=attrs.get("distance_m"))


def decide(attrs: dict, dilation: Dilation, capabilities: dict | None = None, override: str | None = None,
           min_delay_s: float = DEFAULT_MIN_DELAY_S) -> LinkDecision:
    """The emulation of one edge (pure).

    Args:
        attrs: edge attributes (graph contract).
        dilation: the replica's time dilation.
        capabilities: ``{"netem": bool, "red": bool}`` (None: unknown, which means no kernel backend).
        override: ``auto`` | ``kernel`` | ``userspace`` (default ``$TESTBED_LINK_BACKEND`` or auto).
        min_delay_s: emulated delays below this are dropped (see module docstring).
    """
    emulated = edge_params(attrs).scaled(dilation)
    ignored = 0.0
    if 0 < emulated.delay_s < min_delay_s and not emulated.jitter_s:
        ignored = emulated.delay_s
        emulated = replace(emulated, delay_s=0.0)
    if not emulated.needs_delay_line and not emulated.rate_bps:
        return LinkDecision("nothing", emulated, ignored)
    return LinkDecision(tc.choose_backend(emulated, capabilities, override), emulated, ignored)


def kernel_capabilities() -> dict:
    """``{"netem": bool, "red": bool}`` from ``testbed doctor``'s probe (root; cached per process)."""
    from testbed.doctor import capabilities

    caps = capabilities()["capabilities"]
    return {name: bool(caps.get(name, {}).get("present")) for name in ("netem", "red")}


class LinkEmulation:
    """The two replica hooks for one replica: ``link_node_factory`` and ``link_shaper``.

    Args:
        dilation: the replica's time dilation (the same object given to Replica).
        backend: ``auto`` | ``kernel`` | ``userspace`` (default ``$TESTBED_LINK_BACKEND`` or auto).
        out_dir: where delay lines write stats and logs.
        seed: base seed; each edge's delay line gets a seed derived from it and the edge's ends.
        min_delay_s: see :data:`DEFAULT_MIN_DELAY_S`.
        capabilities: ``{"netem", "red"}`` to skip probing (tests); None: ask ``testbed doctor`` when needed.
    """

    def __init__(self, dilation: Dilation, *, backend: str | None = None, out_dir: Path | None = None,
                 seed: int | None = None, min_delay_s: float = DEFAULT_MIN_DELAY_S, capabilities: dict | None = None):
        self.dilation = dilation
        self.backend = backend
        self.out_dir = Path(out_dir) if out_dir else None
        self.seed = seed
        self.min_delay_s = min_delay_s
        self._caps = capabilities
        self.decisions: dict = {}

    def _capabilities(self, attrs: dict) -> dict | None:
        if self._caps is None and (self.backend or "auto") != "userspace":
            probe_needed = edge_params(attrs).scaled(self.dilation).needs_delay_line
            if probe_needed:
                self._caps = kernel_capabilities()
        return self._caps

    def decision(self, u, v, attrs: dict) -> LinkDecision:
        key = (u, v)
        if key not in self.decisions:
            self.decisions[key] = decide(attrs, self.dilation, self._capabilities(attrs), self.backend,
                                         self.min_delay_s)
        return self.decisions[key]

    def node_factory(self, u, v, attrs: dict):
        """``link_node_factory``: a DelayLineNode for userspace-backend edges, else None."""
        d = self.decision(u, v, attrs)
        if d.backend != "userspace":
            return None
        from testbed.links.node import DelayLineNode

        seed = None if self.seed is None else (self.seed ^ zlib.crc32(f"{u}|{v}".encode())) & 0x7FFFFFFF
        params = {"link": d.params, "seed": seed}
        if self.out_dir is not None:
            params["out_dir"] = str(self.out_dir)
        return DelayLineNode, params

    def shaper(self, rep, u, v, intf_u, intf_v, attrs: dict) -> None:
        """``link_shaper``: tc on both ends for htb/kernel edges (userspace edges shape themselves)."""
        d = self.decision(u, v, attrs)
        if d.backend not in ("htb", "kernel"):
            return
        for intf in (intf_u, intf_v):
            for argv in tc.link_cmds(intf.name, d.params):
                proc = intf.node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                out, _ = proc.communicate(timeout=30)
                if proc.returncode != 0:
                    raise EmulationError(f"cannot emulate link {u}--{v} on {intf.node.name}:{intf.name} "
                                         f"(`{' '.join(argv)}`): {out.strip()[-200:]}")

    def replica_hooks(self) -> dict:
        """Keyword arguments for :class:`~testbed.emu.replica.Replica`."""
        return {"link_node_factory": self.node_factory, "link_shaper": self.shaper}

    def summary(self) -> dict:
        """Per edge: backend and emulated parameters, for results/config.json."""
        return {f"{u}--{v}": {"backend": d.backend, "emulated": d.params.describe(),
                              "ignored_delay_s": d.ignored_delay_s}
                for (u, v), d in self.decisions.items()}
