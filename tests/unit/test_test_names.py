"""Test files have unique basenames across tests/unit, tests/integration and tests/vm.

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
