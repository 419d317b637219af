"""Errors the command line turns into exit codes and one-line messages."""


def shown(name: str, limit: int = 60) -> str:
    """A name for a one-line message: quoted, escaped, shortened (names can be 100,000 characters long)."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


class UsageError(Exception):
    """Bad input or usage: exit code 2. The message says what is wrong and how to fix it."""

    exit_code = 2


class ToleranceUnreachable(Exception):
    """The all-FP32 plan misses the tolerance on this backend: exit code 3."""

    exit_code = 3


class BuildFailed(Exception):
    """A backend could not evaluate one plan (a build, a run, a command); the message is the backend's own.

    The plan's verdict is "could not evaluate" (``oracle.Reason``), neither pass nor fail: the search goes on
    around it and never counts it as evidence; the failure is reported, never dropped. ``kind`` says which
    (``oracle.Reason.kind``); ``pins``: the (node, engine layer) pairs of ignored FP32 pins.
    """

    kind = "build"
    pins: tuple = ()

    def __init__(self, message: str = "", kind: str | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind
