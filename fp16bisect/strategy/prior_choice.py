"""``--prior``: whether the prior runs (auto, emulate, none) and the emulate backend it runs on.

``auto``, the default, runs the prior whenever the judging backend declares the emulator a useful start
(``Backend.emulator_prior``: not the emulator itself) and the model runs on ONNX Runtime CPU; ``emulate`` insists (an error when it cannot run); ``none`` searches on
the judge alone. What the prior is and does: ``prior.py``.
"""

from __future__ import annotations

from typing import Literal, get_args

from fp16bisect.errors import UsageError

PriorChoice = Literal["auto", "emulate", "none"]
CHOICES: tuple[PriorChoice, ...] = get_args(PriorChoice)


def wanted(choice: str, backend) -> bool:
    """``--prior``: auto (the default) means emulate whenever the judging backend takes the emulator's search as
    a start (``backend.emulator_prior``: not the emulator itself); asked for one that does not, a usage error."""
    if choice not in CHOICES:
        raise UsageError(f"unknown --prior {choice!r}: use one of {', '.join(CHOICES)}")
    if choice == "none":
        return False
    if not backend.emulator_prior:
        if choice != "auto":
            raise UsageError(f"--prior {choice} is for another backend: on --backend {backend.name} the search "
                             "already runs on the emulator; drop --prior")
        return False
    return True


def emulator(graph, choice: str, listener):
    """The emulate backend for the prior, or None when the model does not run on ONNX Runtime CPU and the
    prior was not asked for explicitly (then the search runs without it, and says so)."""
    from fp16bisect.backends.emulate import EmulateBackend

    try:
        return EmulateBackend(graph)
    except (UsageError, RuntimeError) as exc:
        if choice != "auto":  # asked for explicitly
            raise UsageError(f"--prior {choice}: {exc}") from None
        listener.stage(f"no prior: the model does not run on the emulator ({exc}); searching on the backend alone")
        return None
