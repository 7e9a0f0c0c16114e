"""The layout of the suite itself: unique test basenames, and guest-VM modules that import.

The suite has no ``__init__.py`` packages, so pytest imports every test file by its basename: two
``test_x.py`` in different folders pass when each folder runs alone (as developers run them) and break
collection of ``make test``, which runs unit and integration together (it happened once).
"""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_test_file_basenames_are_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []


def test_vm_guest_modules_import_on_the_host(monkeypatch):
    """The guest suite runs only inside the test VM (``make vm-test``), so an API change that breaks its
    imports would first show there, minutes into CI. Importing each module here catches it in seconds."""
    import importlib.util

    guest = TESTS / "vm" / "guest"
    monkeypatch.syspath_prepend(str(guest))
    modules = sorted(guest.glob("*.py"))
    assert modules
    for path in modules:
        spec = importlib.util.spec_from_file_location(f"vm_guest_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
