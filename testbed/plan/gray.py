"""Gray loss on a tc-shaped link, from the plan (pure): which node runs which ``tc`` on which interface.

A gray failure keeps the carrier up and loses a fraction of the frames. Where a userspace link node
carries the link, its loss changes at runtime (``testbed fail gray``). Where tc HTB shapes both ends (the
collective fabric, fabric_failover: rates only), each end's egress gets a random-drop filter into a class
that holds no frame (:func:`testbed.links.tc.gray_cmds`), so a schedule's ``gray`` works there too and its
drops are counted by a qdisc, like every modelled drop.

    gray_tc(plan, a, b, loss, intf_name)  ->  [(node, [argv, ...]), (node, [argv, ...])]   both directions
"""

from __future__ import annotations

from testbed.errors import EmulationError
from testbed.links import tc


def gray_tc(plan, a, b, loss: float, intf_name) -> list[tuple]:
    """The ``tc`` commands that make link a-b lose ``loss`` of its frames both ways (0 undoes), per node.

    ``intf_name(x, y)``: x's interface toward y (the replica's naming). Each end's commands run in that
    end's namespace: a direction's frames leave through its sender's HTB.

    Raises:
        EmulationError: the link is not shaped by tc HTB on both ends (say why).
    """
    e = plan.link(a, b)
    shaped = {n for n, _ in e.tc}
    if e.backend != "htb" or shaped != {e.u, e.v}:
        raise EmulationError(f"gray loss on {a}-{b}: needs tc HTB on both ends, the plan has {e.backend} on "
                             f"{', '.join(map(str, sorted(shaped, key=str))) or 'no end'} ({e.reason})")
    return [(x, tc.gray_cmds(intf_name(x, y), e.applied.rate_bps, loss)) for x, y in ((e.u, e.v), (e.v, e.u))]


def gray_links_of(G, overrides) -> set:
    """The links of fabric ``G`` whose loss a schedule can change at runtime, from the plan the replica will
    run (``overrides`` as it passes them; capabilities assumed: the link backends of a rates-only plan do not
    depend on them), for :func:`testbed.failures.parse` before anything is built."""
    from testbed.failures import gray_links
    from testbed.plan import plan_replica
    from testbed.plan.capabilities import ASSUMED

    return gray_links(plan_replica(G, ASSUMED, overrides))
