"""``jobs.png`` of a multi-job run: each job's JCT alone and together, and which fabric links each job used.

    +-- JCT per job ----------------+   +-- fabric links (switch to switch), bytes moved -------------+
    | alone (hollow) vs together    |   |  per link: job A alone | job B alone | together              |
    | (filled), slowdown on top     |   |  red label: both jobs used it alone ("shared"), or together   |
    +-------------------------------+   |  it carried more than any job's busiest link alone ("above")  |
                                        +---------------------------------------------------------------+

Two ways a collision shows, because ECMP picks again in every run (the flows' UDP ports and QPNs differ):
``shared``, both jobs' alone runs used the link (a placement or routing that puts them together every time);
``above``, in the run together the link carried more than ``ABOVE`` times what any job put on its busiest
fabric link alone (the ECMP draw of that run put two jobs' flows on it).

Why bytes and not utilisation for the footprint: the runs last different times (together is longer when jobs
interfere), so a link's utilisation moves with the span while the bytes a job sends over it do not. A job
"uses" a link when it moved at least ``MIN_SHARE`` of its busiest fabric link's bytes there: the
controller's LLDP and the hosts' ARP put a few hundred bytes on every link, which is no collision.

Host links are left out: each belongs to one host, and jobs have disjoint hosts, so they never collide.
"""

from __future__ import annotations

from testbed.errors import SpecError

#: a job uses a link when it moved at least this share of its busiest fabric link's bytes over it
MIN_SHARE = 0.05
#: a link carried two jobs' flows together when it moved more than this times any job's busiest link alone
ABOVE = 1.25


def link_rows(alone: dict[str, list[dict]], together: list[dict], hosts: set) -> list[dict]:
    """Per fabric link (no host at either end): bytes each job moved over it alone, bytes together, and
    ``users``: the jobs that used it alone (>= MIN_SHARE of their busiest fabric link). ``shared`` when two or
    more did; ``above`` when together it moved more than ABOVE x the busiest link of any job alone. Links no
    job used and that carried under MIN_SHARE of the busiest link together are left out. Busiest together
    first.

    ``alone``: job name -> that job's alone run's ``links`` (``testbed.collective.report.link_usage`` rows);
    ``together``: the run with every job's ``links``.

    Raises:
        SpecError: fewer than two jobs (one job has nothing to share a link with).
    """
    if len(alone) < 2:
        raise SpecError("jobs", f"a jobs figure needs two or more jobs run alone, got {len(alone)}")

    def fabric(rows):
        return {r["link"]: r["bytes"] for r in rows if not set(r["link"].split("->")) & hosts}

    mine = {job: fabric(rows) for job, rows in alone.items()}
    both = fabric(together)
    used = {job: {k for k, b in m.items() if m and b >= MIN_SHARE * max(m.values()) and b > 0}
            for job, m in mine.items()}
    busiest_alone = max((max(m.values(), default=0) for m in mine.values()), default=0)
    floor = MIN_SHARE * max(both.values(), default=0)
    out = []
    for link in sorted(set(both) | {k for m in mine.values() for k in m}):
        users = [job for job in alone if link in used[job]]
        moved = both.get(link, 0)
        if not users and not (moved > 0 and moved >= floor):
            continue
        out.append({"link": link, "alone_bytes": {job: mine[job].get(link, 0) for job in alone},
                    "together_bytes": moved, "users": users, "shared": len(users) > 1,
                    "above": busiest_alone > 0 and moved > ABOVE * busiest_alone})
    out.sort(key=lambda r: (-r["together_bytes"], -max(r["alone_bytes"].values()), r["link"]))
    return out


def shared_links(rows: list[dict]) -> list[str]:
    """The links two or more jobs used alone (an ECMP collision when the jobs' placements were disjoint)."""
    return [r["link"] for r in rows if r["shared"]]


def above_links(rows: list[dict]) -> list[str]:
    """The links that carried more together than any job's busiest link alone (two jobs' flows on them)."""
    return [r["link"] for r in rows if r["above"]]


def plot(jct_alone: dict[str, float], jct_together: dict[str, float], rows: list[dict], path,
         title: str | None = None, top: int = 24) -> None:
    """Draw ``jobs.png``: JCTs (left) and the busiest ``top`` fabric links' bytes per job alone and together."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = list(jct_alone)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 3]})
    xs = range(len(jobs))
    left.bar([x - 0.2 for x in xs], [jct_alone[j] for j in jobs], 0.4, color="none", edgecolor="C0",
             hatch="//", label="alone")
    left.bar([x + 0.2 for x in xs], [jct_together[j] for j in jobs], 0.4, color="C0", label="together")
    for x, j in zip(xs, jobs, strict=True):
        left.annotate(f"x{jct_together[j] / jct_alone[j]:.3f}", (x + 0.2, jct_together[j]), ha="center",
                      va="bottom", fontsize=8)
    left.set_xticks(list(xs), jobs)
    left.set_ylabel("JCT, emulated s")
    left.set_title("job completion time (slowdown on top)", fontsize=9)
    left.legend(fontsize=7, loc="lower right")

    shown = rows[:top]
    n = len(jobs) + 1
    width = 0.8 / n
    for k, j in enumerate(jobs):
        right.bar([i + (k - n / 2 + 0.5) * width for i in range(len(shown))],
                  [r["alone_bytes"][j] / 1e6 for r in shown], width, color=f"C{k + 1}", label=f"{j} alone")
    right.bar([i + (n / 2 - 0.5) * width for i in range(len(shown))], [r["together_bytes"] / 1e6 for r in shown],
              width, color="grey", label="together")
    right.set_xticks(range(len(shown)), [r["link"] for r in shown], rotation=60, ha="right", fontsize=7)
    for tick, r in zip(right.get_xticklabels(), shown, strict=True):
        if r["shared"] or r["above"]:
            tick.set_color("tab:red")
    shared, above = shared_links(rows), above_links(rows)
    right.set_ylabel("MB moved in the run (emulated)")
    right.set_title(f"fabric links, busiest {len(shown)} of {len(rows)}: {len(shared)} used by two jobs alone, "
                    f"{len(above)} carried more together than any job's busiest link alone (red: either)",
                    fontsize=9)
    right.legend(fontsize=7, loc="upper right")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
