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
    """A backend could not build (or run) the engine of one plan; the message is the backend's own.

    The plan counts as failing and the search goes on; the failure is reported, never dropped.
    """
