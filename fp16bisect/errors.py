"""Errors fp16bisect raises on purpose, each with the exit code the command line turns it into."""

from typing import Literal

# Why a plan could not be evaluated (``evaluation.oracle.Reason.kind``): a build failed, the outputs do not fit
# the references, the judge said so (a command's exit 125), a TensorRT pin was ignored, the process died in it.
ReasonKind = Literal["build", "outputs", "cannot_evaluate", "pins_ignored", "died"]


def shown(name: str, limit: int = 60) -> str:
    """A name for a one-line message: quoted, escaped, shortened (names can be 100,000 characters long)."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


class Error(Exception):
    """The base of every error fp16bisect raises on purpose; ``exit_code`` is the command line's exit code."""

    exit_code = 4  # an internal error unless a subclass says otherwise


class CheckFailed(Error):
    """A check (``fp16bisect check``) failed: exit code 1."""

    exit_code = 1


class UsageError(Error):
    """Bad input or usage: exit code 2. The message says what is wrong and how to fix it."""

    exit_code = 2


class ToleranceUnreachable(Error):
    """The all-FP32 plan misses the tolerance on this backend: exit code 3."""

    exit_code = 3


class CouldNotEvaluate(Error):
    """A backend could not evaluate one plan (its outputs do not fit, the judge said it cannot); the message
    is the backend's own.

    The plan's verdict is "could not evaluate" (``evaluation.oracle.Reason``), neither pass nor fail: the search
    goes on around it and never counts it as evidence; the failure is reported, never dropped. ``kind`` says
    which; ``pins``: the (node, engine layer) pairs of ignored FP32 pins.
    """

    kind: ReasonKind = "cannot_evaluate"
    pins: tuple = ()

    def __init__(self, message: str = "", kind: ReasonKind | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class BuildFailed(CouldNotEvaluate):
    """The plan's model or engine could not be built (written, parsed, compiled)."""

    kind: ReasonKind = "build"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C ended a search that still answered: the smallest set seen to pass, written to its output (exit 130 on
    the command line, as any interrupt). ``result``: what the search returned (``api.results.SearchResult``)."""

    exit_code = 130

    def __init__(self, result):
        super().__init__("interrupted: the smallest set seen to pass was written")
        self.result = result
