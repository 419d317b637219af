"""How a search or a check runs: one frozen record per concern, and the two that compose them.

``Judge`` (the backend and its settings), ``Space`` (the plan space: the low precision, accumulation, headroom,
the nodes kept in FP32 or FP16, grouping), ``Strategy`` (the prior, the minimum and its objective), ``Journaling``
(resuming a journaled search), ``fp16bisect.parallel.Parallel`` and the tolerance (``fp16bisect.tolerance``) are
each checked once, when made (``fp16bisect.records``). ``SearchOptions`` and ``CheckOptions`` hold one of each:
the API, the command line and a manifest entry build them, the pipeline reads them, and they render back into the
command that reproduces the run (``flags``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Mapping, TypeVar, Union, get_args

from fp16bisect import records
from fp16bisect.backends.base import BackendName, CommandOptions, Options
from fp16bisect.errors import UsageError
from fp16bisect.model.headroom import factor
from fp16bisect.model.plan_states import accumulation
from fp16bisect.model.precision import NAMES as PRECISIONS
from fp16bisect.model.precision import Precision, precision_of
from fp16bisect.artifacts.overrides import Recorded
from fp16bisect.parallel import Parallel
from fp16bisect.records import APPLY, CHECK, COMPARE, SCAN, SEARCH, option
from fp16bisect.run.flat_keys import keys_of, split
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
    if isinstance(value, Mapping) and all(isinstance(k, str) and k and _dims(v) for k, v in value.items()):
        return records._text(value)
    raise UsageError(f"{name} {value!r}: give name:shape text (e.g. x:1x3x224x224) or a mapping {{input name: shape}}")


def _dims(value: Any) -> bool:
    """A shape: its text (``1x3x224x224``) or whole numbers."""
    return isinstance(value, str) or isinstance(value, (list, tuple)) and all(
        isinstance(d, int) and not isinstance(d, bool) for d in value)


@dataclass(frozen=True)
class Judge(records.Record):
    """What judges a plan: the backend and what it is made with (``backend="command"`` with ``check``, the command;
    TensorRT's ``typing``, ``opt_level``, ``timing_cache``), the deployment's input shape profile, and how a
    verdict is reached (``repeats``, ``noise_ok``; a check's ``strict_environment``)."""

    SHORTHAND = "backend"

    backend: str = option("auto", records.choice(*BACKENDS), "emulate | tensorrt | command | auto", metavar="NAME")
    check: str | None = option(None, records.text(), "--backend command: the shell command judging a plan",
                               metavar="'CMD'")
    keep_plans: bool = option(False, records.boolean, "--backend command: keep each plan's files (*.plans/)")
    typing: str = option("strong", records.choice(*TYPINGS), "tensorrt: strong or weak (10.x layer pins)",
                         metavar="strong|weak")
    opt_level: int | None = option(None, records.whole(0, 5, optional=True, what="a TensorRT builder optimisation "
                                                       "level"), "tensorrt: builder optimisation level",
                                   metavar="0-5", unset="3")
    timing_cache: str | None = option(None, records.text(), "tensorrt: timing cache", metavar="FILE",
                                      unset="beside -o", path=True)
    max_shapes: str | None = option(None, _shapes, "the deployment's largest shapes (tensorrt's profile)",
                                    metavar="NAME:AxB,...")
    min_shapes: str | None = option(None, _shapes, "the deployment's smallest shapes (as --max-shapes)",
                                    metavar="NAME:AxB,...")
    opt_shapes: str | None = option(None, _shapes, "the deployment's most frequent shapes (as --max-shapes)",
                                    metavar="NAME:AxB,...")
    noise_ok: bool = option(False, records.boolean, "tensorrt: search even if two all-FP16 builds disagree",
                            commands=(SEARCH,))
    repeats: int = option(1, records.whole(1, what="a number of evaluations per plan,"),
                          "evaluate each plan N times; all must pass", metavar="N", commands=(SEARCH,))
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


def _accumulation(value: Any, name: str) -> str | None:
    return None if value is None else accumulation(value)


def _headroom(value: Any, name: str) -> float | None:
    return factor(value)


def _patterns(value: Any, name: str) -> tuple[str, ...]:
    return constraints.patterns(records.strings(value, name), name)


def _grouping(value: Any, name: str) -> str | None:
    found = blocks.grouping(value)
    return None if found is None else str(found)


@dataclass(frozen=True)
class Space(records.Record):
    """The plan space: the low precision every plan runs in (``precision``, None: fp16, or for a check the override
    file's), what FP16 nodes add in (``accumulate``), ``headroom`` F (a peak above limit/F counts as an
    overflow), the nodes kept in FP32 in every plan (``keep_fp32``) or never (``keep_fp16``), and ``group_by``
    (blocks first). A check takes the first three; each None is the override file's value, else the default."""

    SHORTHAND = "precision"

    precision: str | None = option(None, _precision, "fp16 (max 65504) or bf16 (FP32's range)", metavar="fp16|bf16",
                                   commands=(SEARCH, CHECK, COMPARE, APPLY, SCAN), unset="fp16", from_file=True)
    accumulate: str | None = option(None, _accumulation,
                                    "fp16: FP16 nodes add in FP16 too", metavar="fp32|fp16",
                                    commands=(SEARCH, CHECK, COMPARE, APPLY), unset="fp32", from_file=True)
    headroom: float | None = option(None, _headroom, "a peak above 65504/F counts as an overflow", metavar="F",
                                    unset="off", from_file=True)
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


@dataclass(frozen=True)
class Strategy(records.Record):
    """How the search chooses what to evaluate: the emulator's search first (``prior``: auto, emulate, none), then
    the smallest passing set (``minimum``: None, ``"auto"`` or a number of evaluations) by ``objective`` (nodes,
    or estimated cost); and when it stops early: after ``max_evaluations`` evaluations on the judge or
    ``time_limit`` seconds, with the smallest passing set it has (``run/stopping.py``)."""

    prior: str = option("auto", records.choice(*PRIORS), "an emulator search first (auto: on others)",
                        commands=(SEARCH,), metavar="auto|emulate|none")
    minimum: minima.Setting = option(None, records.passed(minima.checked), "then the smallest passing set in N "
                                     "evaluations (no N: 3x)", metavar="N", nargs="?", const=minima.AUTO,
                                     commands=(SEARCH,))
    objective: str = option("nodes", records.choice(*minima.OBJECTIVES), "--minimum's measure (cost: FP32 time)",
                            metavar="nodes|cost", commands=(SEARCH,))
    max_evaluations: int | None = option(None, records.whole(1, optional=True, what="a number of evaluations"),
                                         "stop after N evaluations with the smallest passing set", metavar="N",
                                         commands=(SEARCH,))
    time_limit: float | None = option(None, records.duration, "stop after SECONDS (or 15m, 2h), as "
                                      "--max-evaluations", metavar="SECONDS", commands=(SEARCH,))


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


R = TypeVar("R", bound=records.Record)
Given = Union[R, Mapping[str, Any], str, int, None]  # a record, a dict of its fields, its shorthand, or None
ToleranceGiven = Union[Tolerance, GivenTolerance, Mapping[str, Any], None]


@dataclass(frozen=True)
class SearchOptions:
    """A search's records: the tolerance, the judge, the plan space, the strategy, parallel evaluation and the
    journal, each made from what was given for it (``RECORDS``: a record, None, a dict of its fields or its
    shorthand; the tolerance: a ``Tolerance``, a ``GivenTolerance`` or a dict of its values); ``output``: where the
    caller writes the override JSON (the journal, the TensorRT timing cache and the command backend's plan files go
    beside it); ``model_name``: what the JSON calls the model, when not its path. ``of`` makes one from flat keys
    (a manifest entry's, a script's)."""

    RECORDS: ClassVar[dict[str, type[records.Record]]] = {
        "judge": Judge, "space": Space, "strategy": Strategy, "parallel": Parallel, "journal": Journaling}
    OWN: ClassVar[tuple[str, ...]] = ("output", "model_name", "plans")  # not records: the caller's to set

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
        _coerce(self, self.RECORDS)
        if not isinstance(self.tolerance, Tolerance):
            object.__setattr__(self, "tolerance", GivenTolerance.of(self.tolerance).over(Tolerance()))
        for name in self.OWN:
            object.__setattr__(self, name, _path(getattr(self, name), name))
        _taken(self, SEARCH)
        object.__setattr__(self, "space", self.space.over(None))

    @classmethod
    def given(cls, tolerance: ToleranceGiven = None, judge: Given[Judge] = None, space: Given[Space] = None,
              strategy: Given[Strategy] = None, parallel: Given[Parallel] = None, journal: Given[Journaling] = None,
              output: str | os.PathLike | None = None) -> SearchOptions:
        """From what a caller gave for each part, in any form it takes (the public functions' parameters)."""
        # each part coerced when made (__post_init__: Record.of, GivenTolerance.of)
        return cls(tolerance, judge, space, strategy, parallel, journal, output)  # type: ignore[arg-type]

    @classmethod
    def of(cls, **flat: Any) -> SearchOptions:
        """From flat keys, each a field of one record (``atol``, ``backend``, ``headroom``, ``minimum``, ...), as a
        manifest entry or a script gives them; an unknown key is a ``UsageError`` naming the known ones."""
        return cls(**split(flat, cls.RECORDS, cls.OWN, search=True))

    @classmethod
    def keys(cls, command: str = SEARCH) -> dict[str, str]:
        """Every flat key ``of`` takes for ``command`` but its own (``OWN``) -> the field that holds it
        (``"tolerance"``, ``"judge"``, ...): the tolerance's values and the fields of the records ``command``
        takes."""
        return keys_of(cls.RECORDS, command)

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
        space = self.space.replace(precision=None if self.space.precision == "fp16" else self.space.precision,
                                   accumulate=None if self.space.accumulate == "fp32" else self.space.accumulate)
        for name in self.RECORDS:
            words += (space if name == "space" else getattr(self, name)).flags(SEARCH)
        return words


@dataclass(frozen=True)
class CheckOptions:
    """How a check runs: the tolerance given (each value None: the override file's, else the default), the judge,
    the plan space given (precision, accumulate, headroom; None: the file's, else the default) and parallel
    evaluation, each made from what was given for it, as ``SearchOptions``'s."""

    RECORDS: ClassVar[dict[str, type[records.Record]]] = {"judge": Judge, "space": Space, "parallel": Parallel}
    OWN: ClassVar[tuple[str, ...]] = ("plans",)

    tolerance: GivenTolerance = field(default_factory=GivenTolerance)
    judge: Judge = field(default_factory=Judge)
    space: Space = field(default_factory=Space)
    parallel: Parallel = field(default_factory=Parallel)
    plans: str | None = None  # where the command backend's plan files go
    model_name: str | None = None  # what the check calls the model, when not its path (as SearchOptions)

    def __post_init__(self) -> None:
        _coerce(self, self.RECORDS)
        object.__setattr__(self, "tolerance", GivenTolerance.of(self.tolerance))
        object.__setattr__(self, "plans", _path(self.plans, "plans"))
        _taken(self, CHECK)

    @classmethod
    def given(cls, tolerance: ToleranceGiven = None, judge: Given[Judge] = None, space: Given[Space] = None,
              parallel: Given[Parallel] = None, plans: str | None = None) -> CheckOptions:
        """From what a caller gave for each part, in any form it takes (as ``SearchOptions.given``)."""
        return cls(tolerance, judge, space, parallel, plans)  # type: ignore[arg-type]  # coerced when made


    @classmethod
    def of(cls, **flat: Any) -> CheckOptions:
        """From flat keys, as ``SearchOptions.of`` (the tolerance's values given, each None: the file's)."""
        return cls(**split(flat, cls.RECORDS, cls.OWN, search=False))

    @classmethod
    def keys(cls, command: str = CHECK) -> dict[str, str]:
        """As ``SearchOptions.keys``: every flat key ``of`` takes for ``command`` but its own, and its field."""
        return keys_of(cls.RECORDS, command)

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
        judge = self.judge.replace(strict_environment=False)  # the check's own, read from these options
        return SearchOptions(self.tolerance.over(base), judge, self.space.over(recorded),
                             parallel=self.parallel, plans=self.plans, model_name=self.model_name), source

    def space_from(self, recorded: Recorded | None) -> dict[str, str]:
        """Where the check's precision, accumulation and headroom come from: ``"given"``, ``"from <file>"`` (the
        override file's) or ``"default"``."""
        def source(name: str) -> str:
            if getattr(self.space, name) is not None:
                return "given"
            if recorded is not None and (name != "headroom" or recorded.headroom is not None):
                return f"from {recorded.path}"
            return "default"
        return {name: source(name) for name in ("precision", "accumulate", "headroom")}

    def flags(self) -> list[str]:
        """The command-line words that reproduce this check's options (after the model, its samples and
        ``--overrides``): the values given, each (the rest: the override file's, else the defaults)."""
        words = self.tolerance.flags()
        for name in self.RECORDS:
            words += getattr(self, name).flags(CHECK)
        return words


def _taken(options: Any, command: str) -> None:
    """A ``UsageError`` naming the fields given in ``options``' records (not their defaults) that ``command`` does
    not take (a search's ``keep_fp32`` given to a check)."""
    beyond = []
    for part in options.RECORDS:
        record = getattr(options, part)
        takes = {f.name for f in fields(record) if command in records.commands_of(f)}
        beyond += [name for name in record.changed() if name not in takes]
    if beyond:
        other = CHECK if command == SEARCH else SEARCH
        reason = " (a check judges the plan the override file gives)" if command == CHECK else ""
        raise UsageError(f"{', '.join(beyond)}: a {other}'s option, not a {command}'s{reason}: drop it")


def _coerce(options: Any, parts: dict[str, type[records.Record]]) -> None:
    """Each record of ``options`` made from what was given for it (a record, None, a dict of its fields, or its
    shorthand: a backend's name for the judge, a number of jobs for parallel)."""
    for name, record in parts.items():
        object.__setattr__(options, name, record.of(getattr(options, name), name))


def _path(value: Any, name: str) -> str | None:
    """A path given (a string or a ``PathLike``) as its text, or None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return str(os.fspath(value))
    raise UsageError(f"{name}={value!r}: give a path (a string or a pathlib.Path), or None")
