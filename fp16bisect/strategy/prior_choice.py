"""``--prior``: whether the prior runs (auto, emulate, none) and the emulate backend it runs on.

``auto``, the default, runs the prior whenever the judging backend is not the emulator itself and the
model runs on ONNX Runtime CPU; ``emulate`` insists (an error when it cannot run); ``none`` searches on
the judge alone. What the prior is and does: ``prior.py``.
"""

from __future__ import annotations

from typing import Literal, get_args

from fp16bisect.errors import UsageError

PriorChoice = Literal["auto", "emulate", "none"]
CHOICES: tuple[PriorChoice, ...] = get_args(PriorChoice)


def wanted(choice: PriorChoice, backend_name: str) -> bool:
    """``--prior``: auto (the default) means emulate whenever the judging backend is not the emulator itself."""
    if choice not in CHOICES:
        raise UsageError(f"unknown --prior {choice!r}: use one of {', '.join(CHOICES)}")
    if choice == "none":
        return False
    if backend_name == "emulate":
        if choice == "emulate":
            raise UsageError("--prior emulate is for another backend: on --backend emulate the search already "
                             "runs on the emulator; drop --prior")
        return False
    return True


def emulator(graph, choice: PriorChoice, listener):
    """The emulate backend for the prior, or None when the model does not run on ONNX Runtime CPU and the
    prior was not asked for explicitly (then the search runs without it, and says so)."""
    from fp16bisect.backends.emulate import EmulateBackend

    try:
        return EmulateBackend(graph)
    except (UsageError, RuntimeError) as exc:
        if choice == "emulate":
            raise UsageError(f"--prior emulate: {exc}") from None
        listener.stage(f"no prior: the model does not run on the emulator ({exc}); searching on the backend alone")
        return None
