"""A run as it was asked for: the model, its samples and its records, rendered back into the command that
reproduces it, or into the same command with one concern changed (a printed suggestion).

An ``Invocation`` holds the model and the samples as they were given (paths, as typed; None for what the Python
API was given in memory) and the run's records (``SearchOptions`` for a search, ``CheckOptions`` and the override
file for a check). Every command fp16bisect prints (the Next: block, a check's FAIL hint, the headroom and
accumulation suggestions, batch's hint, the override JSON's ``search.command``) is rendered from one: it carries
every flag the run used, changes only what the suggestion is about (``but``), and writes its answer to a new file
(``beside``), never over the answer it follows. Where the run cannot be typed as a command (a model or samples
given in memory), the suggestion is the Python call (``call``).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace
from typing import Any, Iterable

from fp16bisect.run.options import CheckOptions, SearchOptions, Space
from fp16bisect.tolerance import GivenTolerance, Tolerance
from fp16bisect.tolerance.rules import SCALARS

PROGRAM = "fp16bisect"


def _paths(values: Iterable | None) -> tuple[str, ...] | None:
    """Paths as given (a file, a directory, a glob, a data-loader script ``FILE.py:FUNC``); None when one of them
    is not a path (a dict of arrays: samples given in memory)."""
    given = list(values or ())
    if not all(isinstance(v, (str, os.PathLike)) for v in given):
        return None
    return tuple(str(v) for v in given)


def beside(path: str, tag: str) -> str:
    """A new file beside ``path``, named after what differs (``overrides.json`` -> ``overrides.headroom4.json``)."""
    stem, suffix = os.path.splitext(path)
    return f"{stem}.{tag}{suffix or '.json'}"


@dataclass(frozen=True)
class Invocation:
    """``model`` (None: given in memory), ``inputs`` and ``references`` (None: some given in memory) as given;
    ``options``: a search's or a check's records; ``overrides``: a check's override file (None: none, or one
    given in memory: ``overrides_in_memory``)."""

    model: str | None
    inputs: tuple[str, ...] | None
    references: tuple[str, ...] | None
    options: SearchOptions | CheckOptions
    overrides: str | None = None
    overrides_in_memory: bool = False

    @classmethod
    def of(cls, model: Any, inputs: Iterable, references: Iterable | None,
           options: SearchOptions | CheckOptions, overrides: Any = None) -> Invocation:
        """From what was given: ``model`` is its path unless the options name it otherwise (a model given in
        memory, saved to a temporary file); ``overrides``: a path, or a search's result or JSON (in memory)."""
        named = options.model_name is None and isinstance(model, (str, os.PathLike))
        path = isinstance(overrides, (str, os.PathLike))
        return cls(str(model) if named else None, _paths(inputs), _paths(references), options,
                   str(overrides) if path else None, overrides is not None and not path)

    @property
    def typed(self) -> bool:
        """Whether the run can be typed as a command: its model, samples and override file are files."""
        return (self.model is not None and self.inputs is not None and self.references is not None
                and not self.overrides_in_memory)

    @property
    def command(self) -> str:
        """``search`` or ``check``."""
        return "search" if isinstance(self.options, SearchOptions) else "check"

    @property
    def output(self) -> str | None:
        """Where a search writes its answer (None: a check, or a search that writes none)."""
        return self.options.output if isinstance(self.options, SearchOptions) else None

    def samples(self) -> list[str]:
        """``--inputs X ... --reference R ...`` as given."""
        return ([w for x in self.inputs or () for w in ("--inputs", x)]
                + [w for r in self.references or () for w in ("--reference", r)])

    def argv(self) -> list[str] | None:
        """The command line that reproduces the run (None: not typed; see ``typed``)."""
        if not self.typed:
            return None
        assert self.model is not None
        file = ["--overrides", self.overrides] if self.overrides else []
        return [PROGRAM, self.command, self.model, *self.samples(), *file, *self.options.flags()]

    def shown(self) -> str:
        """The command to type (``argv``, quoted for a POSIX shell), else the Python call (``call``)."""
        words = self.argv()
        return shlex.join(words) if words is not None else self.call()

    def call(self) -> str:
        """The Python call that reproduces the run: ``fp16bisect.search(model, samples, ...)`` with the records'
        values as keywords (``model``, ``samples``, ``reference``: the caller's names where they were given in
        memory)."""
        model = repr(self.model) if self.model is not None else "model"
        samples = repr(list(self.inputs)) if self.inputs is not None else "samples"
        words = [model, samples]
        if self.references is None:
            words.append("reference=reference")
        elif self.references:
            words.append(f"reference={list(self.references)!r}")
        if self.overrides or self.overrides_in_memory:
            words.append(f"overrides={self.overrides!r}" if self.overrides else "overrides=overrides")
        words += [f"{k}={_code(v)}" for k, v in keywords(self.options).items()]
        return f"{PROGRAM}.{self.command}({', '.join(words)})"

    def but(self, output: str | None = None, **space: Any) -> Invocation:
        """This search with the plan space's ``space`` values changed (``headroom=4``, ``accumulate="fp16"``),
        writing ``output`` (a check suggests the search of what it judged: ``searching``, then this)."""
        options = self.options
        assert isinstance(options, SearchOptions), "a check suggests a search: Invocation.searching"
        return replace(self, options=replace(options, space=options.space.replace(**space), output=output))

    def searching(self, judged: SearchOptions) -> Invocation:
        """The search of what a check judged (``CheckOptions.judged_with``: its tolerance, judge, plan space and
        parallel evaluation), on the check's model and samples, writing nothing yet (``but`` names the file)."""
        return replace(self, options=judged, overrides=None, overrides_in_memory=False)

    def checking(self, overrides: str, **space: Any) -> Invocation:
        """The check of ``overrides`` (this search's answer) with this search's judge and parallel evaluation,
        and the plan space's ``space`` values given (``accumulate="fp16"``); the rest is the file's."""
        options = self.options
        assert isinstance(options, SearchOptions)
        return replace(self, options=CheckOptions(judge=options.judge, space=Space(**space), parallel=options.parallel,
                                                  model_name=options.model_name), overrides=overrides)


    def judged_by(self, tolerance: Tolerance, tag: str) -> Invocation:
        """This search judged by ``tolerance`` instead, writing beside its answer (``overrides.TAG.json``)."""
        options = self.options
        assert isinstance(options, SearchOptions)
        output = beside(options.output, tag) if options.output else None
        return replace(self, options=replace(options, tolerance=tolerance, output=output))

    def all_fp16(self, tolerance: Tolerance) -> Invocation:
        """The check of the all-FP16 plan (no override file) judged by ``tolerance``, with this search's judge,
        plan space (precision, accumulation, headroom) and parallel evaluation."""
        options = self.options
        assert isinstance(options, SearchOptions)
        space = options.space
        given = Space(precision=None if space.precision == "fp16" else space.precision,
                      accumulate=None if space.accumulate == "fp32" else space.accumulate, headroom=space.headroom)
        return replace(self, options=CheckOptions(tolerance=_differing(tolerance), judge=options.judge, space=given,
                                                  parallel=options.parallel, model_name=options.model_name),
                       overrides=None, overrides_in_memory=False)


def _differing(tolerance: Tolerance) -> GivenTolerance:
    """``tolerance`` as the values given where they differ from the defaults (an output's own values too)."""
    default = Tolerance()
    differs = {k: getattr(tolerance, k) for k in (*SCALARS, "argmax", "topk")
               if getattr(tolerance, k) != getattr(default, k)}
    return GivenTolerance(**differs, per_output=tolerance.per_output, accept=tolerance.accept)


def keywords(options: SearchOptions | CheckOptions) -> dict[str, Any]:
    """The records that differ from the defaults, as the Python API's keywords: ``tolerance``, ``judge``,
    ``space``, ... each the dict of its fields that are not the defaults (a record whose only change is its
    shorthand field: that value, ``judge="emulate"``)."""
    found: dict[str, Any] = {}
    tolerance = _tolerance_keywords(options.tolerance)
    if tolerance:
        found["tolerance"] = tolerance
    for name in options.RECORDS:
        record = getattr(options, name)
        if name == "space" and isinstance(options, SearchOptions):
            record = record.replace(precision=None if record.precision == "fp16" else record.precision,
                                    accumulate=None if record.accumulate == "fp32" else record.accumulate)
        changed = record.changed()
        if list(changed) == [record.SHORTHAND]:
            found[name] = changed[record.SHORTHAND]
        elif changed:
            found[name] = changed
    if isinstance(options, SearchOptions) and options.output:
        found["output"] = options.output
    return found


def _tolerance_keywords(tolerance: Any) -> dict[str, Any]:
    """A search's ``Tolerance`` as the keywords that differ from the defaults, or a check's ``GivenTolerance`` as
    the keywords given; a value per output as a dict (None: every output's)."""
    if isinstance(tolerance, Tolerance):
        tolerance = _differing(tolerance)
    found = tolerance.keywords()
    accept = found.pop("accept", None)
    if accept is not None:  # the caller's function, by its name
        name = getattr(accept, "__name__", "")
        found["accept"] = _Name(name if name.isidentifier() else "accept")
    return found


@dataclass(frozen=True)
class _Name:
    """A name in the rendered call (the caller's function), not a string."""

    text: str


def _code(value: Any) -> str:
    if isinstance(value, _Name):
        return value.text
    if isinstance(value, float):
        from fp16bisect.records import number_text

        return number_text(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_code(k)}: {_code(v)}" for k, v in value.items()) + "}"
    return repr(value)


__all__ = ["Invocation", "beside", "keywords"]
