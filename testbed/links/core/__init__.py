"""The compiled link core: build it, choose it, and render its command line (the Python control side).

::

    LinkParams --core_model_args()--> linkcore forward --a IF --b IF --stats FILE ...   (C, root)
                                                    \\-> stats JSON, same keys as the Python line
    trace (t, frame)* --run_trace()--> linkcore trace ...  --> (fate, release, marked frame)*  (no root)

``linkcore.c`` is the same model as :class:`testbed.links.queue.Direction` (the reference) behind
AF_PACKET I/O (recvmmsg batches in, one send a frame out), a hybrid ppoll + busy-wait release loop, SCHED_FIFO and
optional CPU pinning. It is compiled on first use with the system C compiler (as the BMv2 bind shim is)
and cached by source hash next to the compiled P4 programs, so an edited source is rebuilt and nothing
is needed in ``make setup``.

Which core runs a link: ``TESTBED_LINK_CORE`` = ``c`` (default) | ``python`` | ``bare`` (the compiled
forwarder without the model, for the benchmark). When the C core cannot be built, the Python line runs
instead and one warning names the compiler log; :func:`selected_core` says which is in use (doctor).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

from testbed.links.model import LinkParams

SOURCE = Path(__file__).resolve().parent / "linkcore.c"
#: Files ``linkcore.c`` #includes (one translation unit): part of the cache key.
PARTS = (SOURCE.with_name("pfc.c"), SOURCE.with_name("pfc_forward.c"), SOURCE.with_name("control.c"))
CORES = ("c", "python", "bare")
CFLAGS = ("-O2", "-Wall", "-Wextra", "-std=gnu11")
#: After a frame, the compiled core can keep reading without sleeping for this long (``--poll-window``),
#: to spare the wake-up of a halted (virtual) CPU. Off by default: measured at 80 kpps it did not lower
#: lateness here (the frames were late *before* reaching the socket: see ``rx_latency_histogram``) and it
#: costs a busy CPU while frames come closer together than the window.
DEFAULT_POLL_WINDOW_S = 0.0


class CoreBuildError(RuntimeError):
    """The C core did not compile; carries the path of the compiler log."""

    def __init__(self, message: str, log: Path | None):
        super().__init__(message)
        self.log = log


def _cache_dir() -> Path:
    from testbed.p4rt.compile import cache_dir

    return cache_dir()


def binary_path() -> Path:
    """Where the binary of the current source lives (keyed by source and flags)."""
    sources = b"".join(f.read_bytes() for f in (SOURCE, *PARTS))
    key = hashlib.sha256(sources + " ".join(CFLAGS).encode()).hexdigest()[:16]
    return _cache_dir() / f"linkcore-{key}"


def build() -> Path:
    """The compiled core, built now if needed.

    Raises:
        CoreBuildError: no C compiler, or the compiler failed (see ``.log`` for its output).
    """
    out = binary_path()
    if out.exists():
        return out
    log = out.with_suffix(".log")
    try:
        return _compile(out, log)
    except OSError as exc:  # an unwritable cache folder, say (a non-root doctor in a root checkout)
        raise CoreBuildError(f"cannot build in {out.parent}: {exc.strerror}", None) from None


def _compile(out: Path, log: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    if cc is None:
        log.write_text("no C compiler (cc or gcc) on PATH; install gcc (make setup does)\n")
        raise CoreBuildError("no C compiler on PATH", log)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    argv = [cc, *CFLAGS, "-o", str(tmp), str(SOURCE)]
    res = subprocess.run(argv, capture_output=True, text=True)
    log.write_text(" ".join(argv) + "\n" + res.stdout + res.stderr)
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise CoreBuildError(f"{cc} failed with status {res.returncode}", log)
    os.replace(tmp, out)
    return out


@functools.lru_cache(maxsize=1)
def _built() -> tuple[Path | None, str]:
    try:
        return build(), ""
    except CoreBuildError as exc:
        return None, f"{exc}; see {exc.log}" if exc.log else str(exc)


def selected_core(requested: str | None = None, warn: bool = True) -> tuple[str, str]:
    """(core in use, detail): the requested core (argument, else ``TESTBED_LINK_CORE``, else ``c``), or
    ``python`` with the reason when the C core cannot be built (warned once on the console)."""
    want = requested or os.environ.get("TESTBED_LINK_CORE") or "c"
    if want not in CORES:
        from testbed.errors import SpecError

        raise SpecError("TESTBED_LINK_CORE", f"must be one of {', '.join(CORES)}, got {want!r}")
    if want == "python":
        return "python", "the Python delay line (requested)"
    path, why = _built()
    if path is None:
        if warn:
            _warn_once(why)
        return "python", f"the Python delay line: the C core did not build ({why})"
    return want, f"compiled core {path}" + (" without the model (bare forwarder)" if want == "bare" else "")


@functools.lru_cache(maxsize=1)
def _warn_once(why: str) -> None:
    from testbed.console import console

    console.print(f"[yellow]warning: link core falls back to the Python delay line: {why}[/yellow]", soft_wrap=True)


def core_model_args(params: LinkParams) -> list[str]:
    """The model options of ``linkcore`` for the *emulated* ``params`` (floats by repr: exact)."""
    limit, unit = params.queue_limit
    argv = ["--rate-bps", repr(float(params.rate_bps or 0.0)), "--delay", repr(float(params.one_way_delay_s)),
            "--jitter", repr(float(params.jitter_s)), "--limit", repr(float(limit)), "--limit-unit", unit]
    red = params.red
    if red is not None:
        argv += ["--red", f"{red.kmin!r},{red.kmax!r},{red.pmax!r},{red.unit},{int(red.ecn)}"]
    loss = params.loss
    if loss is not None and loss.active:
        if loss.kind == "random":
            argv += ["--loss", f"random,{loss.rate!r}"]
        else:
            argv += ["--loss", f"ge,{loss.p!r},{loss.r!r},{loss.loss_bad!r},{loss.loss_good!r}"]
    return argv


def direction_seeds(seed: int | None) -> tuple[int, int]:
    """Per-direction seeds of the two models, derived from the link's seed (OS randomness for None)."""
    rng = random.Random(seed) if seed is not None else random.SystemRandom()
    return rng.getrandbits(32), rng.getrandbits(32)


def forward_argv(binary: str | os.PathLike, intf_a: str, intf_b: str, params: LinkParams,
                 stats_path: str | os.PathLike, *, seed: int | None = None, late_tolerance_s: float,
                 stats_interval_s: float = 1.0, spin_s: float, rt_priority: int, cpu: int | None = None,
                 bare: bool = False, poll_window_s: float = DEFAULT_POLL_WINDOW_S) -> list[str]:
    """``linkcore forward`` for one link node."""
    ab, ba = direction_seeds(seed)
    argv = [str(binary), "forward", "--a", intf_a, "--b", intf_b, "--stats", str(stats_path),
            "--params-json", json.dumps(params.to_dict(), sort_keys=True), *core_model_args(params),
            "--seed-ab", str(ab), "--seed-ba", str(ba), "--late-tolerance", repr(float(late_tolerance_s)),
            "--stats-interval", repr(float(stats_interval_s)), "--spin", repr(float(spin_s)),
            "--poll-window", repr(float(poll_window_s)), "--rt-priority", str(int(rt_priority))]
    if cpu is not None:
        argv += ["--cpu", str(int(cpu))]
    if bare:
        argv.append("--bare")
    return argv


def line_argv(intf_a: str, intf_b: str, params: LinkParams, stats_path: str | os.PathLike, *,
              core: str | None = None, seed: int | None = None, late_tolerance_s: float | None = None,
              stats_interval_s: float = 1.0, spin_s: float | None = None, cpu: int | None = None,
              poll_window_s: float | None = None, rt_priority: int | None = None,
              pfc=None) -> tuple[str, list[str]]:
    """(core, argv) of the link node process: the compiled core when it is available, else the Python line.

    ``cpu`` pins the compiled core to one CPU (the Python line ignores it). ``pfc`` (a
    :class:`testbed.pfc.link.PfcPort`) runs PFC in both directions, in either core. ``rt_priority``: the
    SCHED_FIFO priority the process gives itself (None: ``delayline.DEFAULT_RT_PRIORITY``), in the argv of
    either core, where :func:`rt_priority_of` (and so :func:`testbed.links.wire.spawn_core`) reads it.
    """
    from testbed.links import delayline

    tol = delayline.DEFAULT_LATE_TOLERANCE_S if late_tolerance_s is None else late_tolerance_s
    spin = delayline.DEFAULT_SPIN_S if spin_s is None else spin_s
    prio = delayline.DEFAULT_RT_PRIORITY if rt_priority is None else rt_priority
    which, _detail = selected_core(core)
    if which == "python":
        return which, delayline.build_argv(intf_a, intf_b, params, stats_path, seed=seed, late_tolerance_s=tol,
                                           stats_interval_s=stats_interval_s, spin_s=spin, rt_priority=prio,
                                           pfc=pfc)
    argv = forward_argv(build(), intf_a, intf_b, params, stats_path, seed=seed, late_tolerance_s=tol,
                        stats_interval_s=stats_interval_s, spin_s=spin, rt_priority=prio,
                        cpu=cpu, bare=which == "bare",
                        poll_window_s=DEFAULT_POLL_WINDOW_S if poll_window_s is None else poll_window_s)
    if pfc is not None:
        if which == "bare":
            raise ValueError("the bare forwarder has no model, so no PFC")
        argv += pfc.linkcore_args()
    return which, argv


def rt_priority_of(argv: list[str]) -> int | None:
    """The SCHED_FIFO priority a link core's ``argv`` (:func:`line_argv`, either core) gives the process:
    the value after its last ``--rt-priority``, None without one (not a real-time process).

    Read back from the command line, so the run registry raises the softirq threads above exactly the
    priority the core was told (:meth:`testbed.emu.registry.RunRegistry.spawn`'s ``realtime``).
    """
    argv = [str(a) for a in argv]
    at = [i for i, a in enumerate(argv[:-1]) if a == "--rt-priority"]
    return int(argv[at[-1] + 1]) if at else None


def run_trace(params: LinkParams, seed: int, trace) -> tuple[list[tuple], dict]:
    """Feed ``trace`` ([(arrival_s, frame_bytes)]) to the C model; no root, no sockets.

    Returns:
        ([(fate, release_s | None, frame_out | None)], counters) where fate is fwd, ce, already_ce, tail,
        red or loss and ``frame_out`` is the marked frame for ``ce``.

    Raises:
        CoreBuildError: the core did not compile.
    """
    text = "".join(f"{t!r} {bytes(f).hex()}\n" for t, f in trace)
    res = subprocess.run([str(build()), "trace", *core_model_args(params), "--seed", str(int(seed))], input=text,
                         capture_output=True, text=True, check=True)
    rows, counters = [], {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if parts[0] == "counters":
            counters = {k: int(v) for k, v in (p.split("=") for p in parts[1:])}
            continue
        release = None if parts[1] == "-" else float(parts[1])
        rows.append((parts[0], release, bytes.fromhex(parts[2]) if len(parts) > 2 else None))
    return rows, counters
