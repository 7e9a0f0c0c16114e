"""``testbed topo cost``: cost per host port and per Gbit/s of architectures across cluster sizes.

Sizes are computed by formula (testbed.topo.sizing), never by building a graph, so 128k hosts take
milliseconds. Prices are testbed.topo.cost.COST_TABLE unless overridden (``--price KEY=USD``, repeatable;
``--media`` chooses the allowed cable/optics types). ``--validate`` prints DeepSeek's published
per-endpoint comparison next to ours (docs/cost.md).
"""

from __future__ import annotations

from rich.table import Table

from testbed.console import console, out, print_json
from testbed.errors import UsageError
from testbed.topo import deepseek, sizing
from testbed.topo.cost import MEDIA, SPEEDS, Prices


def add_parser(verbs) -> None:
    p = verbs.add_parser("cost", help="cost per host port across sizes, by formula (no graph is built)",
                         description=__doc__)
    p.add_argument("--kinds", default="fat-tree,spine-leaf,rail-optimized,big-switch",
                   help=f"comma list from {', '.join(sizing.KINDS)} (default: %(default)s)")
    p.add_argument("--hosts", default="1k,8k,32k,128k",
                   help="comma list of host-port counts; k = 1024 (default: %(default)s)")
    p.add_argument("--speed", default="400G", help=f"host port speed, one of {', '.join(f'{s}G' for s in SPEEDS)}")
    p.add_argument("--gpus-per-server", type=int, default=8, help="rails of rail-only (default 8)")
    p.add_argument("--planes", type=int, default=8, help="planes of multi-plane (default 8)")
    p.add_argument("--media", default=None,
                   help=f"allowed media, comma list from {', '.join(MEDIA)}; '+aec,+lpo' adds to the default")
    p.add_argument("--price", action="append", default=[], metavar="KEY=USD",
                   help="override one price or assumption (keys in docs/cost.md), repeatable")
    p.add_argument("--plot", metavar="FILE", help="plot cost per host port against size (PNG/SVG/PDF)")
    p.add_argument("--validate", action="store_true", help="also print the DeepSeek validation table")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=run)


def _sizes(text: str) -> list[int]:
    sizes = []
    for item in text.split(","):
        item = item.strip().lower()
        mult = 1024 if item.endswith("k") else 1
        try:
            n = int(float(item[:-1] if mult > 1 else item) * mult)
        except (ValueError, OverflowError):  # 'x', 'nan'; 'inf', '1e400'
            raise UsageError(f"--hosts: {item!r} is not a count such as 512, 8k or 128k") from None
        if n < 1:
            raise UsageError(f"--hosts: {item!r} must be >= 1")
        sizes.append(n)
    return sizes


def _speed(text: str) -> int:
    t = text.strip().upper().removesuffix("G")
    if not t.isdigit() or int(t) not in SPEEDS:
        raise UsageError(f"--speed: {text!r} is not one of {', '.join(f'{s}G' for s in SPEEDS)}")
    return int(t)


def _media(text):
    if text is None:
        return None
    from testbed.topo.cost import DEFAULT_MEDIA

    items = [m.strip() for m in text.split(",") if m.strip()]
    if all(m.startswith("+") for m in items):
        return tuple(DEFAULT_MEDIA) + tuple(m[1:] for m in items)
    return tuple(m.lstrip("+") for m in items)


def _overrides(pairs) -> dict:
    prices = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        try:
            prices[key.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--price: expected KEY=USD such as dr_400g=700, got {pair!r}") from None
        if not sep:
            raise UsageError(f"--price: expected KEY=USD such as dr_400g=700, got {pair!r}")
    return prices


def run(args) -> int:
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    for k in kinds:
        if k not in sizing.KINDS:
            raise UsageError(f"--kinds: unknown kind {k!r}; allowed: {', '.join(sizing.KINDS)}")
    if args.gpus_per_server < 1 or args.planes < 1:
        raise UsageError("--gpus-per-server and --planes must be >= 1")
    prices = Prices.from_table(_overrides(args.price), _media(args.media), field="--price")
    rows = sizing.study(kinds, _sizes(args.hosts), _speed(args.speed), prices, args.gpus_per_server,
                        args.planes)
    doc = {"rows": rows, "media": list(prices.media), "prices": prices.table}
    if args.validate:
        doc["deepseek"] = {"assumptions": deepseek.assumptions(), "rows": deepseek.table()}
    if args.plot:
        doc["plot"] = plot(rows, args.plot)
    if args.json:
        print_json(doc)
        return 0
    _print(rows)
    if args.validate:
        _print_deepseek(doc["deepseek"])
    if args.plot:
        console.print(f"wrote {doc['plot']}")
    return 0


def _print(rows) -> None:
    t = Table(title="cost by formula (USD; ports installed, media by reach)", title_justify="left")
    for col in ("kind", "hosts", "tiers", "switches", "optics", "ports $", "links $", "total $",
                "$/host port", "$/Gbit/s"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for r in rows:
        if "infeasible" in r:
            t.add_row(r["kind"], f"{r['hosts']:,}", "-", "-", "-", "-", "-", "-", "n/a", r["infeasible"])
            continue
        t.add_row(r["kind"], f"{r['hosts']:,}", str(r["tiers"]), f"{r['switches']:,}", f"{r['optical_modules']:,}",
                  f"{r['switch_ports_usd']:,.0f}", f"{r['links_usd']:,.0f}", f"{r['cost_usd']:,.0f}",
                  f"{r['per_host_port_usd']:,.0f}", f"{r['per_gbps_usd']:.2f}")
    out.print(t)


def _print_deepseek(doc) -> None:
    a = doc["assumptions"]
    t = Table(title=f"DeepSeek (arXiv 2505.09343) per endpoint: switch ${a['switch_usd']:,.0f} "
                    f"(${a['port_usd']:,.0f}/port), link ${a['link_usd']:,.0f}", title_justify="left")
    for col in ("topology", "endpoints", "switches", "links", "counts", "ours $", "theirs $", "error", "row"):
        t.add_column(col, justify="left" if col in ("topology", "row") else "right")
    for r in doc["rows"]:
        t.add_row(r["topology"], f"{r['endpoints']:,}", f"{r['switches']:,}", f"{r['links']:,}",
                  "match" if r["counts_match"] else "DIFFER", f"{r['per_endpoint_usd']:,.0f}",
                  f"{r['published_usd']:,.0f}", f"{r['error']:+.1%}", r["role"])
    out.print(t)


def plot(rows, path) -> str:
    """Cost per host port against hosts, one line per kind (log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind in dict.fromkeys(r["kind"] for r in rows):
        pts = [(r["hosts"], r["per_host_port_usd"]) for r in rows if r["kind"] == kind and "infeasible" not in r]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=kind)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("host ports")
    ax.set_ylabel("cost per host port (USD)")
    ax.set_title("fabric cost per normalised port (testbed topo cost)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--plot: cannot write {path}: {exc}") from None
    finally:
        plt.close(fig)
    return str(path)
