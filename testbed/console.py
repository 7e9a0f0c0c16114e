"""Output conventions shared by every command.

* Data (tables, listings, reports: what a user pipes into ``grep``, ``less`` or a file) goes to
  **stdout**: :data:`out` (a rich Console) or :func:`print_json` with ``--json``.
* Progress, logs and hints go to **stderr** (:data:`console`), so that ``> file`` keeps only the data and
  ``--json`` leaves exactly one JSON document on stdout and nothing else.
* Commands that need root call :func:`require_root` first: one clear line, exit 2.
"""

from __future__ import annotations

import json
import os
import sys

from rich.console import Console

from testbed.errors import NotRootError

#: Console for human-readable output (tables, progress): always stderr. Piped into a log (CI, ``make demo
#: | tee``) rich would fold wide tables to 80 columns; give them room unless COLUMNS says otherwise.
console = Console(stderr=True, highlight=False,
                  width=None if sys.stderr.isatty() or os.environ.get("COLUMNS") else 160)

#: Console for data (tables, listings): always stdout; plain text (no colour codes) when piped.
out = Console(highlight=False, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)


def data_console(json_mode: bool) -> Console:
    """Where a command's data goes: :data:`out` (stdout), or :data:`console` (stderr) when ``--json`` owns
    stdout. The tables and result lines of a run are data: ``testbed run NAME > results.txt`` keeps them."""
    return console if json_mode else out


def print_json(document) -> None:
    """Print one JSON document on stdout (the only thing a ``--json`` command writes there)."""
    json.dump(document, sys.stdout, indent=2, sort_keys=False, default=_jsonable)
    sys.stdout.write("\n")
    sys.stdout.flush()


def _jsonable(obj):
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "__dict__"):
        return vars(obj)
    return str(obj)


def is_root() -> bool:
    return os.geteuid() == 0


def require_root(what: str) -> None:
    """Raise :class:`NotRootError` (exit 2) unless running as root."""
    if not is_root():
        raise NotRootError(what)
