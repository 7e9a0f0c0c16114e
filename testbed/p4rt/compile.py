"""Compile P4 programs for BMv2 with ``p4c-bm2-ss``, cached by content.

Compiling ``fabric.p4`` takes seconds of a shared CPU; every switch and every test would pay it again.
The cache key is a hash of everything that determines the output::

    sha256( compiler version | compiler flags | the source | every file under <source dir>/include/ )
        -> build/p4/<stem>-<key[:16]>.json

so editing an include or upgrading p4c recompiles, and nothing else does. The output is written to a
temporary name and renamed, so two runs compiling at once never read a half-written JSON.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from testbed.errors import CapabilityError, TestbedError

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
#: Where compiled JSON goes unless TESTBED_P4_CACHE says otherwise.
DEFAULT_CACHE = REPO_ROOT / "build" / "p4"
COMPILER = "p4c-bm2-ss"
#: Flags every compile gets (part of the cache key).
BASE_FLAGS = ("--std", "p4-16", "--arch", "v1model")


class P4CompileError(TestbedError):
    """p4c rejected a program; the message carries the compiler's own diagnostics."""


def cache_dir() -> Path:
    return Path(os.environ.get("TESTBED_P4_CACHE", DEFAULT_CACHE))


def include_files(source: Path) -> list[Path]:
    """Files the source may include: everything under ``<source dir>/include`` (sorted, deterministic)."""
    inc = source.parent / "include"
    if not inc.is_dir():
        return []
    return sorted(p for p in inc.rglob("*") if p.is_file())


def cache_key(source_text: bytes, includes: list[tuple[str, bytes]], compiler_version: str,
              flags: tuple[str, ...] = BASE_FLAGS) -> str:
    """Hash of every input of a compile (pure: no files, no processes).

    Args:
        source_text: the program's bytes.
        includes: (relative name, bytes) of each include file.
        compiler_version: the compiler's ``--version`` output.
        flags: compiler flags.
    """
    h = hashlib.sha256()
    for part in (compiler_version.encode(), "\0".join(flags).encode(), source_text):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    for name, data in includes:
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def compiler_version(compiler: str = COMPILER) -> str:
    path = shutil.which(compiler)
    if path is None:
        raise CapabilityError(f"{compiler} not found: install BMv2/p4c (sudo make setup; see testbed doctor)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout + out.stderr).strip()


def define_flags(defines=None) -> tuple[str, ...]:
    """``-DNAME=VALUE`` flags, sorted so that the same defines give the same cache key."""
    out = []
    for name, value in sorted((defines or {}).items()):
        if not str(name).isidentifier():
            raise P4CompileError(f"preprocessor define {name!r} is not an identifier")
        out.append(f"-D{name}={value}")
    return tuple(out)


def compile_p4(source: str | os.PathLike, out_dir: str | os.PathLike | None = None,
               compiler: str = COMPILER, defines=None) -> Path:
    """Compile ``source`` (a .p4 file) to BMv2 JSON, reusing a cached result when inputs are unchanged.

    ``defines`` (``{"AGG_ELEMS": 64}``) become ``-D`` flags, part of the cache key and of the file name.

    Returns:
        Path of the JSON.

    Raises:
        CapabilityError: the compiler is not installed.
        P4CompileError: the program does not compile (the compiler's messages are in the error).
    """
    src = Path(source).resolve()
    if not src.is_file():
        raise P4CompileError(f"P4 source {src} does not exist")
    version = compiler_version(compiler)
    incs = [(str(p.relative_to(src.parent)), p.read_bytes()) for p in include_files(src)]
    flags = BASE_FLAGS + define_flags(defines)
    key = cache_key(src.read_bytes(), incs, version, flags)
    out = Path(out_dir) if out_dir is not None else cache_dir()
    out.mkdir(parents=True, exist_ok=True)
    tag = "".join(f"-{k.lower()}{v}" for k, v in sorted((defines or {}).items()))
    target = out / f"{src.stem}{tag}-{key[:16]}.json"
    if target.is_file():
        return target
    tmp = out / f".{target.name}.{os.getpid()}.tmp"
    argv = [compiler, *flags, "-I", str(src.parent), "-o", str(tmp), str(src)]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        msg = (res.stderr or res.stdout).strip()
        raise P4CompileError(f"{src.name} does not compile:\n{msg}")
    os.replace(tmp, target)
    return target
