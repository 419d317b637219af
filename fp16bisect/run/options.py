"""How a search or a check runs (``SearchOptions``, ``CheckOptions``): built once by the CLI, a manifest entry or a
script.

What is searched (the model, its samples and references) is given beside the options; what a long run
says goes to a ``Listener``. Everything else a run depends on is here, typed: the tolerance, the judging
backend and its ``Options``, where the files beside the override JSON go, resuming, repeats, parallel
evaluation and the prior.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import get_args

from fp16bisect.backends.base import BackendName, CommandOptions, Options
from fp16bisect.errors import UsageError
from fp16bisect.model.plan_states import Accumulation, accumulation
from fp16bisect.model.precision import FP16, Precision
from fp16bisect.parallel import Parallel
from fp16bisect.run.paths import plans_dir, timing_cache_path
from fp16bisect.strategy.prior_choice import CHOICES
from fp16bisect.strategy import blocks, constraints
from fp16bisect.strategy import minimum as minima
from fp16bisect.tolerance import GivenTolerance, Tolerance


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
    A check is given ``CheckOptions`` and runs with the ``SearchOptions`` they resolve to (``judged_with``)."""

    tolerance: Tolerance = field(default_factory=Tolerance)
    backend: str = "auto"  # one of BACKENDS
    backend_options: Options = field(default_factory=Options)
    noise_ok: bool = False
    output: str | None = None
    repeats: int = 1
    restart: bool = False
    retry_crashed: bool = False
    keep_journal: bool = False
    parallel: Parallel | None = None
    prior: str = "auto"  # one of strategy.prior_choice.CHOICES
    headroom: float | None = None  # --headroom F: a peak above 65504/F counts as an overflow (run/coverage.py)
    precision: Precision = FP16  # --precision: the low precision every plan runs in (model/precision.py)
    model_name: str | None = None  # what the override JSON calls the model, when not its path (Graph.name)
    accumulate: Accumulation = "fp32"  # --accumulate: what the judge assumes FP16 nodes add in (model/plan_states.py)
    minimum: minima.Setting = None  # --minimum [N]: then the smallest passing set, N more evaluations (strategy/minimum.py)
    objective: str = "nodes"  # --objective: nodes (the fewest) or cost (the least estimated cost, model/cost.py)
    keep_fp32: tuple[str, ...] = ()  # --keep-fp32 PATTERN: in FP32 in every plan (strategy/constraints.py)
    keep_fp16: tuple[str, ...] = ()  # --keep-fp16 PATTERN: never in FP32
    group_by: blocks.Grouping | None = None  # --group-by: blocks first, then nodes (strategy/blocks.py)

    def __post_init__(self) -> None:
        accumulation(self.accumulate)
        object.__setattr__(self, "keep_fp32", constraints.patterns(self.keep_fp32, "--keep-fp32"))
        object.__setattr__(self, "keep_fp16", constraints.patterns(self.keep_fp16, "--keep-fp16"))
        object.__setattr__(self, "group_by", blocks.grouping(self.group_by))
        if self.group_by is not None and (self.minimum is not None or self.objective != "nodes"
                                          or self.accumulate != "fp32"):
            raise UsageError("--group-by with --minimum, --objective cost or --accumulate fp16: choose one (the "
                             "block search is over FP32 sets, 1-minimal)")
        object.__setattr__(self, "minimum", minima.checked(self.minimum))
        minima.objective(self.objective)
        if not isinstance(self.repeats, int) or isinstance(self.repeats, bool) or self.repeats < 1:
            raise UsageError(f"repeats {self.repeats!r}: give a number of evaluations per plan, 1 or more")
        if self.prior not in CHOICES:
            raise UsageError(f"unknown prior {self.prior!r}: use one of {', '.join(CHOICES)}")
        _check_backend(self.backend)

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


@dataclass(frozen=True)
class CheckOptions:
    """How a check runs: the tolerance, precision and headroom it was given (each None: the override file's
    recorded value when a file is checked, else the default), the judging backend, its ``Options``, ``parallel``,
    and ``strict_environment`` (fail when the file was verified elsewhere, ``diagnose/drift.py``)."""

    tolerance: GivenTolerance = field(default_factory=GivenTolerance)
    backend: str = "auto"  # one of BACKENDS
    backend_options: Options = field(default_factory=Options)
    parallel: Parallel | None = None
    headroom: float | None = None
    precision: Precision | None = None
    strict_environment: bool = False
    accumulate: Accumulation | None = None  # None: the override file's, else fp32

    def __post_init__(self) -> None:
        _check_backend(self.backend)
        if self.accumulate is not None:
            accumulation(self.accumulate)

    def judged_with(self, recorded: Recorded | None) -> tuple[SearchOptions, str]:
        """The options the check runs with, and where its tolerance comes from (``"from overrides.json"``,
        ``"from overrides.json; atol given"``, ``"given"`` or ``"defaults"``): each value not given is
        ``recorded``'s (an override file's), else the default."""
        values = self.tolerance.values()
        named = [k for k, v in values.items() if v is not None]
        if recorded is not None and len(named) < len(values):
            source = f"from {recorded.path}" + (f"; {', '.join(named)} given" if named else "")
        else:
            source = "given" if named else "defaults"
        headroom = self.headroom if self.headroom is not None else recorded.headroom if recorded else None
        precision = self.precision or (recorded.precision if recorded is not None else FP16)
        base = recorded.tolerance if recorded is not None else Tolerance()
        accumulate = self.accumulate or (recorded.accumulate if recorded is not None else "fp32")
        return SearchOptions(self.tolerance.over(base), self.backend, self.backend_options, parallel=self.parallel,
                             headroom=headroom, precision=precision, accumulate=accumulate), source


@dataclass(frozen=True)
class Recorded:
    """What an override file says a check judges with: its tolerance, precision and headroom (``--headroom F``
    the search was given; None: none)."""

    path: str
    tolerance: Tolerance
    precision: Precision
    headroom: float | None
    accumulate: Accumulation = "fp32"


def _check_backend(name: str) -> None:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}: use one of {', '.join(map(repr, BACKENDS))}")
