"""How a search or a check runs (``SearchOptions``): built once by the CLI, a manifest entry or a script.

What is searched (the model, its samples and references) is given beside the options; what a long run
says goes to a ``Listener``. Everything else a run depends on is here, typed: the tolerance, the judging
backend and its ``Options``, where the files beside the override JSON go, resuming, repeats, parallel
evaluation and the prior.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from fp16bisect.backends.base import BackendName, CommandOptions, Options
from fp16bisect.model.precision import FP16, Precision
from fp16bisect.parallel import Parallel
from fp16bisect.run.paths import plans_dir, timing_cache_path
from fp16bisect.strategy.prior_choice import PriorChoice
from fp16bisect.tolerance import Tolerance


BACKENDS: tuple[str, ...] = ("auto", *get_args(BackendName))  # what --backend takes


@dataclass(frozen=True)
class SearchOptions:
    """``output``: where the caller writes the override JSON (named in its exports); the journal (resume), the
    TensorRT timing cache and the command backend's plan files go beside it unless ``backend_options`` names
    them. ``noise_ok``: search even if two builds differ beyond the tolerance. ``repeats``: evaluations per
    plan, all must pass. ``restart``: discard the journal of an earlier run instead of resuming it;
    ``retry_crashed``: evaluate again the plans an earlier run died evaluating; ``keep_journal``: keep the
    journals once the search has finished (else removed when the override JSON is written). ``parallel``: the
    oracle evaluates independent plans on worker processes or Ray tasks. ``prior``: ``auto`` (the emulator's search
    first whenever the backend is not the emulator and the model runs there), ``emulate`` or ``none``.
    A check uses the tolerance, the backend, its options and ``parallel`` only."""

    tolerance: Tolerance = field(default_factory=Tolerance)
    backend: BackendName | Literal["auto"] = "auto"
    backend_options: Options = field(default_factory=Options)
    noise_ok: bool = False
    output: str | None = None
    repeats: int = 1
    restart: bool = False
    retry_crashed: bool = False
    keep_journal: bool = False
    parallel: Parallel | None = None
    prior: PriorChoice = "auto"
    headroom: float | None = None  # --headroom F: a peak above 65504/F counts as an overflow (run/coverage.py)
    precision: Precision = FP16  # --precision: the low precision every plan runs in (model/precision.py)

    def beside_output(self) -> SearchOptions:
        """With the timing cache and the plans directory beside ``output`` where the backend options left them at
        their defaults (``overrides.json`` -> ``overrides.timing.cache``, ``overrides.plans/``)."""
        if not self.output:
            return self
        chosen = self.backend_options
        trt, command = chosen.tensorrt, chosen.command
        if trt.timing_cache is None:
            trt = replace(trt, timing_cache=timing_cache_path(self.output))
        if command.plans_dir == CommandOptions.plans_dir:
            command = replace(command, plans_dir=plans_dir(self.output))
        return replace(self, backend_options=replace(chosen, tensorrt=trt, command=command))
