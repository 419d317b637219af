"""How a search or a check runs: one frozen record per concern, and the two that compose them.

``Judge`` (the backend and its settings), ``Space`` (the plan space: the low precision, accumulation, headroom,
the nodes kept in FP32 or FP16, grouping), ``Strategy`` (the prior, the minimum and its objective), ``Journaling``
(resuming a journaled search), ``fp16bisect.parallel.Parallel`` and the tolerance (``fp16bisect.tolerance``) are
each checked once, when made (``fp16bisect.records``). ``SearchOptions`` and ``CheckOptions`` hold one of each:
the API, the command line and a manifest entry build them, the pipeline reads them, and they render back into the
command that reproduces the run (``flags``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, get_args

from fp16bisect import records
from fp16bisect.algorithm.budget import Budget
from fp16bisect.backends.base import BackendName, CommandOptions, Options
from fp16bisect.errors import UsageError
from fp16bisect.model.headroom import factor
from fp16bisect.model.plan_states import ACCUMULATIONS
from fp16bisect.model.precision import NAMES as PRECISIONS
from fp16bisect.model.precision import Precision, precision_of
from fp16bisect.parallel import Parallel
from fp16bisect.records import CHECK, SEARCH, option
from fp16bisect.run.paths import plans_dir, timing_cache_path
from fp16bisect.strategy import blocks, constraints
from fp16bisect.strategy import minimum as minima
from fp16bisect.strategy.prior_choice import CHOICES as PRIORS
from fp16bisect.tolerance import GivenTolerance, Tolerance

BACKENDS: tuple[str, ...] = ("auto", *get_args(BackendName))  # what --backend takes
TYPINGS = ("strong", "weak")


def _shapes(value: Any, name: str) -> str | None:
    """A shape flag's value: trtexec's text, or a mapping {input: "1x3x224x224" or [1, 3, 224, 224]} (stored as the
    text); the three are checked together (``Judge.checked``)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return records._text(value)
    raise UsageError(f"{name} {value!r}: give name:shape text (e.g. x:1x3x224x224) or a mapping {{input name: shape}}")


@dataclass(frozen=True)
class Judge(records.Record):
    """What judges a plan: the backend and what it is made with (``backend="command"`` with ``check``, the command;
    TensorRT's ``typing``, ``opt_level``, ``timing_cache``), the deployment's input shape profile, and how a
    verdict is reached (``repeats``, ``noise_ok``; a check's ``strict_environment``)."""

    SHORTHAND = "backend"

    backend: str = option("auto", records.choice(*BACKENDS), "emulate | tensorrt | command | auto (default)",
                          metavar="NAME")
    check: str | None = option(None, records.text(), "--backend command: the shell command judging a plan",
                               metavar="'CMD'")
    keep_plans: bool = option(False, records.boolean, "--backend command: keep each plan's files (*.plans/)")
    typing: str = option("strong", records.choice(*TYPINGS), "tensorrt: strong (default) or weak (10.x: layer pins)")
    opt_level: int | None = option(None, records.whole(0, 5, optional=True, what="a TensorRT builder optimisation "
                                                       "level"), "tensorrt: builder optimisation level (default 3)",
                                   metavar="0-5")
    timing_cache: str | None = option(None, records.text(), "tensorrt: timing cache (default: beside -o)",
                                      metavar="FILE")
    noise_ok: bool = option(False, records.boolean, "tensorrt: search even if two all-FP16 builds disagree",
                            commands=(SEARCH,))
    repeats: int = option(1, records.whole(1, what="a number of evaluations per plan,"),
                          "evaluate each plan N times; all must pass (default 1)", metavar="N", commands=(SEARCH,))
    max_shapes: str | None = option(None, _shapes, "the deployment's largest shapes (tensorrt's profile)",
                                    metavar="NAME:AxB,...")
    min_shapes: str | None = option(None, _shapes, "the deployment's smallest shapes (as --max-shapes)",
                                    metavar="NAME:AxB,...")
    opt_shapes: str | None = option(None, _shapes, "the deployment's most frequent shapes (as --max-shapes)",
                                    metavar="NAME:AxB,...")
    strict_environment: bool = option(
        False, records.boolean, "fail (exit 1) when --overrides was verified elsewhere: another backend, GPU or "
        "TensorRT version (or, for the emulator, ONNX Runtime version), or records no environment",
        commands=(CHECK,))

    def checked(self) -> None:
        from fp16bisect.backends import FLAGS, KEYWORDS, check_options

        check_options(self.backend, self.options(), FLAGS if records.as_flags() else KEYWORDS)

    @property
    def profile(self) -> dict | None:
        """The deployment's shape profile per input (min, opt, max), None when no shape flag was given."""
        from fp16bisect.model import shapes

        return shapes.profile_of(self.min_shapes, self.opt_shapes, self.max_shapes)

    def options(self, plans: str | None = None) -> Options:
        """What the backend is made with (``plans``: where the command backend's plan files go)."""
        return Options.of(command=self.check, keep_plans=self.keep_plans, typing=self.typing,
                          opt_level=self.opt_level, timing_cache=self.timing_cache, plans_dir=plans,
                          input_shapes=self.profile)


def _precision(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, Precision):
        return value.name
    return records.choice(*PRECISIONS)(value.lower() if isinstance(value, str) else value, name)


def _headroom(value: Any, name: str) -> float | None:
    return factor(value)


def _patterns(value: Any, name: str) -> tuple[str, ...]:
    return constraints.patterns(records.strings(value, name), name)


def _grouping(value: Any, name: str) -> str | None:
    found = blocks.grouping(value)
    return None if found is None else str(found)


FILE_DEFAULT = "the override file's, else "  # how a check's help says a default it reads from the file first


@dataclass(frozen=True)
class Space(records.Record):
    """The plan space: the low precision every plan runs in (``precision``, None: fp16, or for a check the override
    file's), what FP16 nodes add in (``accumulate``), ``headroom`` F (a peak above limit/F counts as an
    overflow), the nodes kept in FP32 in every plan (``keep_fp32``) or never (``keep_fp16``), and ``group_by``
    (blocks first). A check takes the first three; each None is the override file's value, else the default."""

    SHORTHAND = "precision"

    precision: str | None = option(None, _precision, "fp16 (max 65504) or bf16 (FP32's range), default: "
                                   + FILE_DEFAULT + "fp16", metavar="fp16|bf16")
    accumulate: str | None = option(None, records.choice(*ACCUMULATIONS, optional=True),
                                    "fp16: FP16 nodes add in FP16 too (default: " + FILE_DEFAULT + "fp32)",
                                    metavar="fp32|fp16")
    headroom: float | None = option(None, _headroom, "a peak above 65504/F counts as an overflow (default: "
                                    + FILE_DEFAULT + "off)", metavar="F")
    keep_fp32: tuple[str, ...] = option((), _patterns, "nodes in FP32 in every plan (node-id regex, op:TYPE)",
                                        metavar="PATTERN", commands=(SEARCH,), repeat=True)
    keep_fp16: tuple[str, ...] = option((), _patterns, "nodes never in FP32 (node-id regex, op:TYPE)",
                                        metavar="PATTERN", commands=(SEARCH,), repeat=True)
    group_by: str | None = option(None, _grouping, "search blocks (name scopes) first, then nodes in them",
                                  metavar="scope[:DEPTH]", commands=(SEARCH,))

    @property
    def low(self) -> Precision:
        """The low precision (FP16 when not given)."""
        return precision_of(self.precision)

    @property
    def grouping(self) -> blocks.Grouping | None:
        return blocks.grouping(self.group_by)

    @property
    def accumulation(self) -> str:
        return self.accumulate or "fp32"

    def over(self, recorded: Recorded | None) -> Space:
        """Each of precision, accumulate and headroom not given: ``recorded``'s (an override file's), else the
        default."""
        if recorded is None:
            return replace(self, precision=self.precision or "fp16", accumulate=self.accumulation)
        return replace(self, precision=self.precision or recorded.precision.name,
                       accumulate=self.accumulate or recorded.accumulate,
                       headroom=self.headroom if self.headroom is not None else recorded.headroom)


UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}  # --time-limit's units (none: seconds)


def _seconds(value: Any, name: str) -> float | None:
    """A duration: seconds (a number, or its text), or text with a unit (``90s``, ``15m``, ``2h``); above 0."""
    if value is None:
        return None
    text = value.strip().lower() if isinstance(value, str) else ""
    unit = next((u for u in sorted(UNITS, key=len, reverse=True) if text.endswith(u)), "")
    try:
        seconds = records.real(0, above=True)(text[: len(text) - len(unit)] if unit else value, name)
    except UsageError:
        raise UsageError(f"{name} {value if isinstance(value, str) else repr(value)}: give seconds above 0, or a "
                         "duration with a unit: 90s, 15m, 2h") from None
    assert seconds is not None
    return seconds * UNITS.get(unit, 1.0)


@dataclass(frozen=True)
class Strategy(records.Record):
    """How the search chooses what to evaluate: the emulator's search first (``prior``: auto, emulate, none), then
    the smallest passing set (``minimum``: None, ``"auto"`` or a number of evaluations) by ``objective`` (nodes,
    or estimated cost); and when it stops early: after ``max_evaluations`` evaluations on the judge or
    ``time_limit`` seconds, with the smallest passing set it has (``budget``)."""

    prior: str = option("auto", records.choice(*PRIORS), "the emulator searches first (auto: on other backends)",
                        commands=(SEARCH,), metavar="auto|emulate|none")
    minimum: minima.Setting = option(None, records.passed(minima.checked), "then the smallest passing set in N "
                                     "evaluations (default 3x)", metavar="N", nargs="?", const=minima.AUTO,
                                     commands=(SEARCH,))
    objective: str = option("nodes", records.choice(*minima.OBJECTIVES), "--minimum's measure: nodes, or "
                            "estimated FP32 time", metavar="nodes|cost", commands=(SEARCH,))
    max_evaluations: int | None = option(None, records.whole(1, optional=True, what="a number of evaluations"),
                                         "stop after N evaluations on the judge with the smallest passing set "
                                         "(exit 5; rerun to continue)", metavar="N", commands=(SEARCH,))
    time_limit: float | None = option(None, _seconds, "stop after this long (90, 15m, 2h) with the smallest "
                                      "passing set (exit 5; rerun to continue)", metavar="SECONDS",
                                      commands=(SEARCH,))

    def budget(self) -> Budget | None:
        """The budget of a search starting now (None: no limit): the evaluations it may run on the judge (those a
        journal replays cost nothing) and its time from now."""
        if self.max_evaluations is None and self.time_limit is None:
            return None
        return Budget(self.max_evaluations, self.time_limit)


@dataclass(frozen=True)
class Journaling(records.Record):
    """A journaled search (``output`` given): ``restart`` discards an earlier run's journal instead of resuming
    it, ``retry_crashed`` evaluates again the plans an earlier run died evaluating, ``keep_journal`` keeps the
    journals once the search has finished (else removed when the override JSON is written)."""

    restart: bool = option(False, records.boolean, "discard this search's journal instead of resuming it",
                           commands=(SEARCH,))
    keep_journal: bool = option(False, records.boolean, "keep the journal once the search has finished",
                                commands=(SEARCH,))
    retry_crashed: bool = option(False, records.boolean, "evaluate again the plans an earlier run died evaluating",
                                 commands=(SEARCH,))


@dataclass(frozen=True)
class SearchOptions:
    """A search's records: the tolerance, the judge, the plan space, the strategy, parallel evaluation and the
    journal; ``output``: where the caller writes the override JSON (the journal, the TensorRT timing cache and the
    command backend's plan files go beside it); ``model_name``: what the JSON calls the model, when not its path.
    ``of`` makes one from flat keys (a manifest entry's, a script's)."""

    tolerance: Tolerance = field(default_factory=Tolerance)
    judge: Judge = field(default_factory=Judge)
    space: Space = field(default_factory=Space)
    strategy: Strategy = field(default_factory=Strategy)
    parallel: Parallel = field(default_factory=Parallel)
    journal: Journaling = field(default_factory=Journaling)
    output: str | None = None
    model_name: str | None = None
    plans: str | None = None  # where the command backend's plan files go (None: beside output)

    def __post_init__(self) -> None:
        _coerce(self, {"judge": Judge, "space": Space, "strategy": Strategy, "parallel": Parallel,
                       "journal": Journaling})
        if not isinstance(self.tolerance, Tolerance):
            object.__setattr__(self, "tolerance", _tolerance(self.tolerance).over(Tolerance()))
        object.__setattr__(self, "space", self.space.over(None))

    @classmethod
    def of(cls, **flat: Any) -> SearchOptions:
        """From flat keys, each a field of one record (``atol``, ``backend``, ``headroom``, ``minimum``, ...), as a
        manifest entry or a script gives them; an unknown key is a ``UsageError`` naming the known ones."""
        return cls(**split(flat, {"judge": Judge, "space": Space, "strategy": Strategy, "parallel": Parallel,
                                  "journal": Journaling}, ("output", "model_name", "plans"), search=True))

    # what the pipeline reads, by its old names
    @property
    def backend(self) -> str:
        return self.judge.backend

    @property
    def precision(self) -> Precision:
        return self.space.low

    @property
    def accumulate(self) -> str:
        return self.space.accumulation

    @property
    def headroom(self) -> float | None:
        return self.space.headroom

    @property
    def backend_options(self) -> Options:
        """The backend's options, its timing cache and plan files beside ``output`` unless the judge names them."""
        chosen = self.judge.options(self.plans)
        if not self.output:
            return chosen
        trt, command = chosen.tensorrt, chosen.command
        if trt.timing_cache is None:
            trt = replace(trt, timing_cache=timing_cache_path(self.output))
        if command.plans_dir == CommandOptions.plans_dir:
            command = replace(command, plans_dir=plans_dir(self.output))
        return replace(chosen, tensorrt=trt, command=command)

    def flags(self) -> list[str]:
        """The command-line words that reproduce this search's options (after the model and its samples)."""
        words = ["-o", self.output] if self.output else []
        words += self.tolerance.flags()
        for record in (self.judge, self.space, self.strategy, self.parallel, self.journal):
            words += record.flags(SEARCH)
        return words


@dataclass(frozen=True)
class CheckOptions:
    """How a check runs: the tolerance given (each value None: the override file's, else the default), the judge,
    the plan space given (precision, accumulate, headroom; None: the file's, else the default) and parallel
    evaluation."""

    tolerance: GivenTolerance = field(default_factory=GivenTolerance)
    judge: Judge = field(default_factory=Judge)
    space: Space = field(default_factory=Space)
    parallel: Parallel = field(default_factory=Parallel)
    plans: str | None = None  # where the command backend's plan files go

    def __post_init__(self) -> None:
        _coerce(self, {"judge": Judge, "space": Space, "parallel": Parallel})
        object.__setattr__(self, "tolerance", _tolerance(self.tolerance))
        space = self.space
        beyond = [f.name for f in fields(space) if CHECK not in records.flag_of(f).commands  # type: ignore[union-attr]
                  and getattr(space, f.name) != f.default]
        if beyond:
            raise UsageError(f"{', '.join(beyond)}: a search's plan space, not a check's (a check judges the plan "
                             "the override file gives): drop it")

    @classmethod
    def of(cls, **flat: Any) -> CheckOptions:
        """From flat keys, as ``SearchOptions.of`` (the tolerance's values given, each None: the file's)."""
        return cls(**split(flat, {"judge": Judge, "space": Space, "parallel": Parallel}, ("plans",), search=False))

    @property
    def backend(self) -> str:
        return self.judge.backend

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
        base = recorded.tolerance if recorded is not None else Tolerance()
        return SearchOptions(self.tolerance.over(base), self.judge, self.space.over(recorded),
                             parallel=self.parallel, plans=self.plans), source


@dataclass(frozen=True)
class Recorded:
    """What an override file says a check judges with: its tolerance, precision and headroom (``--headroom F``
    the search was given; None: none)."""

    path: str
    tolerance: Tolerance
    precision: Precision
    headroom: float | None
    accumulate: str = "fp32"


def _coerce(options: Any, parts: dict[str, type[records.Record]]) -> None:
    """Each record of ``options`` made from what was given for it (a record, None, a dict of its fields, or its
    shorthand: a backend's name for the judge, a number of jobs for parallel)."""
    for name, record in parts.items():
        object.__setattr__(options, name, record.of(getattr(options, name), name))


def _tolerance(value: Any) -> GivenTolerance:
    """The tolerance given: a ``GivenTolerance``, a dict of its values, or None (none given)."""
    if value is None:
        return GivenTolerance()
    if isinstance(value, GivenTolerance):
        return value
    if isinstance(value, dict):
        return GivenTolerance(**value)
    raise UsageError(f"tolerance={value!r}: give a Tolerance, a GivenTolerance or a dict of its values (atol, rtol, "
                     "...)")


TOLERANCE_KEYS = ("atol", "rtol", "min_cosine", "max_mismatch", "error_stat", "argmax", "topk", "accept")


def split(flat: dict, parts: dict[str, type[records.Record]], own: tuple[str, ...], *, search: bool) -> dict:
    """Flat keys routed to the records that own them: the tolerance's, each record's fields, and ``own`` (the
    composite's own fields); an unknown key is a ``UsageError`` listing the known ones."""
    tolerance = {k: flat[k] for k in TOLERANCE_KEYS if k in flat}
    made: dict[str, Any] = {}
    for name, record in parts.items():
        names = {f.name for f in fields(record)}
        made[name] = record(**{k: flat[k] for k in names if k in flat})
    made.update({k: flat[k] for k in own if k in flat})
    known = {*TOLERANCE_KEYS, *own, *(f.name for record in parts.values() for f in fields(record))}
    unknown = sorted(set(flat) - known)
    if unknown:
        raise UsageError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    given = GivenTolerance(**tolerance)
    made["tolerance"] = given.over(Tolerance()) if search else given
    return made
