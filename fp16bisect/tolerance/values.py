"""The pass rule as values: the ``Tolerance`` an output is judged by, and the ``GivenTolerance`` a caller gives.

An output passes when, elementwise, ``|a - b| <= atol + rtol * |b|`` (NumPy
``allclose``) holds for all but ``max_mismatch`` of its elements, no element is
NaN or inf where the reference is finite, and, when ``min_cosine`` is set, the
cosine similarity reaches it. All outputs of all samples must pass.

Each output may have its own values (``Tolerance.per_output``, ``for_output``; the flags' ``[OUTPUT:]VALUE``),
its own statistic of the elementwise error against its allowance (``error_stat``: ``max``, today's rule,
``mean``, ``median`` or ``pNN``: that statistic of ``|a - b| / (atol + rtol*|b|)`` must be <= 1), or a task
metric instead of its values: ``argmax`` (the argmax along an axis equals the reference's at every position; where
the reference's top two are within a relative 1e-6 either index is accepted) or ``topk`` (the top-K index sets are
equal). Integer and boolean outputs are compared exactly. ``accept``: the Python API's callable
``(outputs, reference) -> bool``, run per sample, ANDed with the rest (``accepted``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Optional, Union

import numpy as np

from fp16bisect.errors import UsageError
from fp16bisect.records import APPLY, CHECK, COMPARE, MIGRATE, SEARCH, number_text, option, shown
from fp16bisect.tolerance.rules import (SCALARS, check_rules, for_output_named, picklable, rules_json,
                                     split, words)

# Defaults a deployment engineer accepts for FP16: its unit roundoff is 4.9e-4,
# and a few dozen rounded layers in a row drift by ~1e-3 relative. 1e-2 on
# both keeps real regressions (inf, NaN, flushed values, wrong ranks) visible.
DEFAULT_ATOL = 1e-2
DEFAULT_RTOL = 1e-2
TIE = 1e-6  # argmax/topk: reference values this close (relative) are a tie, either index accepted
# The API's forms of a value that may be per output (``GivenTolerance``), and of ``accept``
PerOutput = Union[float, str, Mapping, Sequence, None]
Accept = Optional[Callable[[dict, dict], Any]]
NOT_REPRODUCIBLE = "a Python callable (not reproducible from this file)"  # what the JSON says of ``accept``


@dataclass(frozen=True)
class Tolerance:
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    min_cosine: float | None = None
    max_mismatch: float = 0.0  # fraction of elements allowed outside atol + rtol*|ref|
    error_stat: str = "max"  # the statistic of |a - b| / (atol + rtol*|b|) that must be <= 1
    argmax: int | None = None  # an axis: the output passes when its argmax there is the reference's
    topk: tuple[int, int] | None = None  # (K, axis): the output passes when its top-K index sets are the reference's
    per_output: tuple = ()  # ((output name, GivenTolerance), ...): an output's values that differ from these
    accept: Callable[[dict, dict], Any] | None = None  # per sample, (outputs, reference) -> bool, ANDed

    def __post_init__(self) -> None:
        """Each value checked here, wherever it comes from (a flag, a manifest, the API, an override file): one
        ``UsageError`` naming the field and what to give instead. Values are stored as floats."""
        check_rules(self)
        if self.error_stat != "max" and self.max_mismatch:
            raise UsageError(f"error_stat {self.error_stat} with max_mismatch {self.max_mismatch:g}: give one "
                             "(a statistic other than max judges every element already)")
        object.__setattr__(self, "per_output", _per_output(self.per_output))
        for name, given in self.per_output:
            with for_output_named(name):
                given.over(replace(self, per_output=()))
        for name in ("atol", "rtol", "max_mismatch"):
            value = _number(name, getattr(self, name))
            if not (math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} {value:g}: give a finite number >= 0")
            object.__setattr__(self, name, value)
        if self.max_mismatch > 1:
            raise UsageError(f"max_mismatch {self.max_mismatch:g} is a fraction of elements: give a number from "
                             "0 to 1")
        if self.min_cosine is not None:
            value = _number("min_cosine", self.min_cosine)
            if not -1 <= value <= 1:  # NaN fails too
                raise UsageError(f"min_cosine {value:g}: give a cosine similarity from -1 to 1")
            object.__setattr__(self, "min_cosine", value)

    def replace(self, atol: float | None = None, rtol: float | None = None, min_cosine: float | None = None,
                max_mismatch: float | None = None, **rules) -> Tolerance:
        """This tolerance with each value given (not None) replaced, checked again."""
        given = {"atol": atol, "rtol": rtol, "min_cosine": min_cosine, "max_mismatch": max_mismatch, **rules}
        return replace(self, **{k: v for k, v in given.items() if v is not None})

    def for_output(self, name: str) -> Tolerance:
        """The values output ``name`` is judged by: these, with its own (``per_output``) in their place."""
        given = dict(self.per_output).get(name)
        if given is None:
            return self if not self.per_output else replace(self, per_output=())
        return given.over(replace(self, per_output=()))

    def outputs_named(self, outputs) -> None:
        """A ``UsageError`` listing ``outputs`` when a per-output value names an output not among them."""
        unknown = [name for name, _ in self.per_output if name not in set(outputs)]
        if unknown:
            raise UsageError(f"the tolerance names output {unknown[0]!r}, which the model does not have: its "
                             f"outputs are {', '.join(outputs) or '(none)'}")

    def shippable(self) -> None:
        """A ``UsageError`` when ``accept`` cannot go to worker processes or Ray tasks (they take it pickled)."""
        picklable(self.accept)

    def __str__(self) -> str:
        text = words(self)
        for name, given in self.per_output:
            text += f"; {name!r}: {words(given.over(replace(self, per_output=())))}"
        return text + ("; and the Python accept function" if self.accept is not None else "")

    def flags(self) -> list[str]:
        """The command-line words that give this tolerance where it differs from the defaults (``--atol 0.05``,
        an output's own values as ``--atol OUTPUT:0.05``). ``accept``, a Python function, has no flag."""
        words = _flags(self, Tolerance(), "")
        for name, given in self.per_output:
            words += _flags(given.over(replace(self, per_output=())), self, f"{name}:")
        return words

    def to_json(self) -> dict:
        data = {k: getattr(self, k) for k in ("atol", "rtol", "min_cosine", "max_mismatch")}
        data.update(rules_json(self))
        if self.per_output:
            data["per_output"] = {name: given.to_json() for name, given in self.per_output}
        if self.accept is not None:
            data["accept"] = NOT_REPRODUCIBLE
        return data

    @classmethod
    def from_json(cls, data: dict) -> Tolerance:
        """An override file's ``tolerance`` (its ``accept``, a callable, is not read back: ``accept`` None)."""
        rules = {k: data[k] for k in ("error_stat", "argmax", "topk") if data.get(k) is not None}
        return cls(float(data["atol"]), float(data["rtol"]),
                   None if data.get("min_cosine") is None else float(data["min_cosine"]),
                   float(data.get("max_mismatch", 0.0)), **rules,
                   per_output=tuple((k, GivenTolerance(**v)) for k, v in (data.get("per_output") or {}).items()))


# A GivenTolerance field's flag (``--atol [OUTPUT:]VALUE``, repeatable): when not given, ``Tolerance``'s default, or
# with an override file, the file's
_VALUE = "[OUTPUT:]VALUE"
_GIVEN: dict[str, Any] = {"commands": (SEARCH, CHECK, COMPARE, APPLY, MIGRATE), "repeat": True, "from_file": True}


@dataclass(frozen=True)
class GivenTolerance:
    """The tolerance values a caller gave, each None where another source's applies (an override file's
    recorded tolerance, else the defaults): ``over`` fills them in. Checked when made, as a ``Tolerance``.

    Each of ``atol``, ``rtol``, ``min_cosine``, ``max_mismatch`` and ``error_stat`` is a value (every output's),
    a dict ``{output: value}`` (the key None: every output's) or a list of ``"[OUTPUT:]VALUE"`` strings (the
    flags' form; the last colon splits the output's name from its value; no name: every output's). ``argmax``:
    a list of ``"OUTPUT[:AXIS]"`` or a dict ``{output: axis}``; ``topk``: a list of ``"OUTPUT:K[:AXIS]"`` or a
    dict ``{output: K or (K, axis)}``. All end up as one value each plus ``per_output`` (``tolerance/rules.py``)."""

    # each checked with the others in ``__post_init__``: no check of its own
    atol: Any = option(None, None, "absolute tolerance", metavar=_VALUE, **_GIVEN)
    rtol: Any = option(None, None, "relative tolerance", metavar=_VALUE, **_GIVEN)
    min_cosine: Any = option(None, None, "also require this cosine similarity", metavar=_VALUE, **_GIVEN)
    max_mismatch: Any = option(None, None, "fraction of elements allowed outside it", metavar=_VALUE, **_GIVEN)
    error_stat: Any = option(None, None, "max|mean|median|pNN of error/allowance <= 1", metavar="[OUTPUT:]STAT",
                             **_GIVEN)
    argmax: Any = option(None, None, "judge OUTPUT by its argmax along AXIS (no AXIS: -1)", metavar="OUTPUT[:AXIS]",
                         **_GIVEN)
    topk: Any = option(None, None, "judge OUTPUT by its top-K indices along AXIS (no AXIS: -1)",
                       metavar="OUTPUT:K[:AXIS]", **_GIVEN)
    accept: Callable[[dict, dict], Any] | None = None  # the Python API's alone: no flag, no manifest key
    per_output: Any = ()

    def __post_init__(self) -> None:
        per: dict[str, dict] = {name: given.values() for name, given in _per_output(self.per_output)}
        for key in (*SCALARS, "argmax", "topk"):
            default, named = split(key, getattr(self, key))
            object.__setattr__(self, key, default)
            for name, value in named.items():
                per.setdefault(name, {})[key] = value
        check_rules(self)
        found = []
        for name, values in sorted(per.items()):
            with for_output_named(name):
                found.append((name, GivenTolerance(**values)))
        object.__setattr__(self, "per_output", tuple(found))
        self.over(Tolerance())  # each given value checked now, not when the check runs

    @classmethod
    def of(cls, value: Any) -> GivenTolerance:
        """What a caller gave as ``tolerance=``, as the values given: None (none given), a ``GivenTolerance``, a
        ``Tolerance`` (every value given) or a dict of ``GivenTolerance``'s fields; anything else, or a key that is
        none of them, is a ``UsageError``."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Tolerance):
            return cls(**{k: getattr(value, k) for k in (*SCALARS, "argmax", "topk", "accept", "per_output")})
        if isinstance(value, Mapping):
            known = [f.name for f in fields(cls)]
            unknown = sorted(shown(k) for k in value if k not in known)
            if unknown:
                raise UsageError(f"tolerance: unknown key(s) {', '.join(unknown)}; a tolerance takes "
                                 f"{', '.join(known)}")
            return cls(**value)
        raise UsageError(f"tolerance={value!r}: give a Tolerance, a GivenTolerance or a dict of its values (atol, "
                         "rtol, ...)")

    def values(self) -> dict:
        """The given values for every output (None: not given); ``per_output`` apart."""
        return {k: getattr(self, k) for k in (*SCALARS, "argmax", "topk")}

    @property
    def given(self) -> bool:
        return (any(v is not None for v in self.values().values()) or bool(self.per_output)
                or self.accept is not None)

    def over(self, base: Tolerance) -> Tolerance:
        """``base`` with the given values in place of its own, output by output."""
        per = dict(base.per_output)
        for name, given in self.per_output:
            per[name] = GivenTolerance(**{**per.get(name, GivenTolerance()).values(),
                                          **{k: v for k, v in given.values().items() if v is not None}})
        values = {k: v for k, v in self.values().items() if v is not None}
        if self.accept is not None:
            values["accept"] = self.accept
        if values.get("argmax") is not None:
            values["topk"] = None
        return replace(base, **values, per_output=tuple(per.items()))

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.values().items() if v is not None}

    def flags(self) -> list[str]:
        """The command-line words that give these values, each given one (a default's value too: given, it
        overrides an override file's), an output's own as ``--atol OUTPUT:0.05``; ``accept`` has no flag."""
        words = _given_flags(self.values(), "")
        for name, given in self.per_output:
            words += _given_flags(given.values(), f"{name}:")
        return words

    def keywords(self) -> dict:
        """These values as the API's keywords take them (a value given per output: a dict, None every output's)."""
        found: dict = {k: v for k, v in self.values().items() if v is not None}
        for name, given in self.per_output:
            for key, value in given.values().items():
                if value is not None:
                    found[key] = {**({None: found[key]} if not isinstance(found.get(key, {}), dict) else
                                     found.get(key, {})), name: value}
        return {**found, **({"accept": self.accept} if self.accept is not None else {})}


def _flags(t: Tolerance, base: Tolerance, output: str) -> list[str]:
    """The flags of ``t``'s values that differ from ``base``'s, each prefixed by ``output`` (``"name:"`` or "")."""
    words: list[str] = []
    for key in SCALARS:
        value = getattr(t, key)
        if value != getattr(base, key) and value is not None:
            words += [f"--{key.replace('_', '-')}", f"{output}{number_text(value)}" if isinstance(value, float) else
                      f"{output}{value}"]
    if output and t.argmax is not None and t.argmax != base.argmax:
        words += ["--argmax", f"{output}{t.argmax}"]
    if output and t.topk is not None and t.topk != base.topk:
        words += ["--topk", f"{output}{t.topk[0]}:{t.topk[1]}"]
    return words


def _given_flags(values: dict, output: str) -> list[str]:
    """The flags of the given ``values`` (None: not given), each prefixed by ``output`` (``"name:"`` or ""); an
    ``argmax`` or ``topk`` for every output has no flag (the flags name their output)."""
    words: list[str] = []
    for key, value in values.items():
        if value is None or (key in ("argmax", "topk") and not output):
            continue
        text = number_text(value) if isinstance(value, float) else \
            f"{value[0]}:{value[1]}" if key == "topk" else str(value)
        words += [f"--{key.replace('_', '-')}", f"{output}{text}"]
    return words


def _per_output(value) -> tuple:
    """``per_output`` as sorted ((name, GivenTolerance), ...) pairs, from pairs or a dict."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (tuple, list)) and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in value):
        pairs = list(value)
    else:
        raise UsageError(f"per_output {value!r}: give a dict {{output name: {{atol: ..., ...}}}}")
    found = []
    for name, given in pairs:
        if not isinstance(name, str) or not name:
            raise UsageError(f"per-output tolerance for {name!r}: name an output of the model")
        if not isinstance(given, (GivenTolerance, Mapping)):
            raise UsageError(f"per_output {name!r}: {given!r}: give a dict of that output's values (atol, rtol, ...)")
        with for_output_named(name):
            found.append((name, GivenTolerance.of(given)))
    return tuple(sorted(found, key=lambda p: p[0]))


def _number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UsageError(f"{name} {value!r} is not a number: give a finite number")
    return float(value)


# For metrics alone (what a comparison measures, not whether it passes): no finite error exceeds it.
