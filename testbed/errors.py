"""Domain exceptions.

Every error a user can cause is a :class:`TestbedError` (or subclass); the CLI prints its message on one
line and exits with :attr:`TestbedError.exit_code` instead of a traceback.
"""

from __future__ import annotations


class TestbedError(Exception):
    """Base of all expected errors; message is shown to the user as is."""

    __test__ = False  # not a pytest test class
    exit_code = 1


class UsageError(TestbedError):
    """Bad command-line input or a missing privilege (exit 2)."""

    exit_code = 2


class SpecError(TestbedError):
    """A spec or parameter is invalid.

    Args:
        field: dotted path of the offending field, e.g. ``links.dci.distance``.
        message: what is wrong and what is allowed.
    """

    exit_code = 2

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class NotRootError(UsageError):
    def __init__(self, what: str = "this command"):
        super().__init__(f"{what} needs root: run it with sudo")


class CapabilityError(TestbedError):
    """A needed capability (OVS, BMv2, ...) is absent on this machine; message says how to get it."""

    exit_code = 3


class EmulationError(TestbedError):
    """Something failed while building or running a replica; names the node and its log path."""

    exit_code = 1
