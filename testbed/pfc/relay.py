"""A switch relaying PAUSE to the ports that feed the paused one: tc commands (pure: argv only).

A PFC frame that a link node sends upstream arrives at a switch port. The emulated switches (OVS, the
incast fixture's tc fan-in) do not pause, so the frame is copied, in the kernel and at once, to the ports
whose traffic leaves by that port: their link nodes receive it on their switch side and hold that priority
of their towards-the-switch direction (after their cable's delay). ``clsact`` + ``u32`` + ``mirred`` are
in every kernel the testbed runs on; this one has no ``gact drop``, so the last target gets the frame
itself (``redirect``) and the others copies (``mirror``). What the switch's own datapath sees of it (OVS
reads its ports with packet sockets, before tc) misses its flow table and is dropped there.
"""

from __future__ import annotations

#: MAC Control (802.3 Annex 31B): PAUSE and PFC frames.
MAC_CONTROL_ETHERTYPE = "0x8808"


def relay_argv(dev: str, targets) -> list[list[str]]:
    """tc commands (argv lists, ``tc`` first) that send every MAC Control frame arriving on ``dev`` out of
    each of ``targets``. ``dev`` must not have a clsact qdisc yet (it is added here)."""
    targets = list(targets)
    if not targets:
        raise ValueError(f"relay_argv: no targets for {dev}")
    actions = [a for i, t in enumerate(targets)
               for a in ("action", "mirred", "egress", "mirror" if i < len(targets) - 1 else "redirect", "dev", t)]
    return [["tc", "qdisc", "add", "dev", dev, "clsact"],
            ["tc", "filter", "add", "dev", dev, "ingress", "protocol", MAC_CONTROL_ETHERTYPE, "prio", "1", "u32",
             "match", "u32", "0", "0", *actions]]
