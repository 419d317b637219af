"""How an output is judged beyond atol and rtol, for ``tolerance``: the forms a per-output value is given in
(``"[OUTPUT:]VALUE"``, the last colon splitting; ``argmax`` ``OUTPUT[:AXIS]``; ``topk`` ``OUTPUT:K[:AXIS]``;
a dict ``{output: value}``), the rules' own checks (``error_stat``, ``argmax``, ``topk``, ``accept``), and what
the rules measure: a statistic of the elementwise error, the argmax along an axis, the top-K index sets.

Ties: where the reference's values are within a relative ``tie`` of the top one (of the K-th one, for top-K),
either index is accepted, so an output whose reference cannot say which class wins never fails on it.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from fp16bisect.errors import UsageError

SCALARS = ("atol", "rtol", "min_cosine", "max_mismatch", "error_stat")  # per output, each in "[OUTPUT:]VALUE" form
RULE_DEFAULTS = {"error_stat": "max", "argmax": None, "topk": None}
STAT = re.compile(r"(max|mean|median|p(\d+(?:\.\d+)?))")


def words(t) -> str:
    """A tolerance's values in words."""
    if t.argmax is not None:
        return f"argmax along axis {t.argmax}"
    if t.topk is not None:
        return f"top-{t.topk[0]} along axis {t.topk[1]}"
    text = f"atol {t.atol:g}, rtol {t.rtol:g}"
    if t.error_stat != "max":
        text += f", {t.error_stat} of the error <= its allowance"
    if t.min_cosine is not None:
        text += f", cosine >= {t.min_cosine:g}"
    if t.max_mismatch:
        text += f", up to {t.max_mismatch:.2%} of elements may exceed"
    return text


def rules_json(t) -> dict:
    """The rules (error_stat, argmax, topk) of a ``Tolerance`` that differ from the defaults, as JSON."""
    found = {k: getattr(t, k) for k, default in RULE_DEFAULTS.items() if getattr(t, k) != default}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in found.items()}


def check_rules(t) -> None:
    """``error_stat``, ``argmax``, ``topk`` and ``accept`` of a ``Tolerance`` (or a ``GivenTolerance``, None
    where not given), normalised in place."""
    if t.error_stat is not None:
        text = str(t.error_stat).strip().lower()
        match = STAT.fullmatch(text)
        if not match or (match.group(2) is not None and float(match.group(2)) > 100):
            raise UsageError(f"error_stat {t.error_stat!r}: give max, mean, median or pNN, NN a percentile from "
                             "0 to 100 (e.g. p99)")
        object.__setattr__(t, "error_stat", text)
    if t.argmax is not None:
        object.__setattr__(t, "argmax", _integer("argmax", t.argmax, "an axis"))
    if t.topk is not None:
        k, axis = (t.topk, -1) if not isinstance(t.topk, (tuple, list)) else (tuple(t.topk) + (-1,))[:2]
        k = _integer("topk", k, "K, the number of top indices,")
        if k < 1:
            raise UsageError(f"topk {k}: give K >= 1")
        object.__setattr__(t, "topk", (k, _integer("topk", axis, "an axis")))
    if t.argmax is not None and t.topk is not None:
        raise UsageError("argmax and topk both given for one output: give one")
    if t.accept is not None and not callable(t.accept):
        raise UsageError(f"accept {t.accept!r} is not callable: give a function (outputs, reference) -> bool")


def _integer(name: str, value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, str)):
        raise UsageError(f"{name} {value!r}: give {what} as an integer")
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name} {value!r}: give {what} as an integer") from None


def split(key: str, value) -> tuple[Any, dict]:
    """One value given for every output (None: none) and {output: value}, from any form ``GivenTolerance``
    takes."""
    if value is None or (isinstance(value, (int, float, np.number)) and not isinstance(value, bool)):
        return value, {}
    if isinstance(value, Mapping):
        return value.get(None), {k: v for k, v in value.items() if k is not None}
    if key == "topk" and isinstance(value, (tuple, list)) and value and not isinstance(value[0], str):
        return tuple(value), {}  # (K, axis) for every output
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise UsageError(f"{key} {value!r}: give a number, a dict {{output: value}} or {_FORMS[key]} text")
    default, named = None, {}
    for item in value:
        if not isinstance(item, str):
            raise UsageError(f"{key} {item!r}: give {_FORMS[key]}")
        name, part = _spec(key, item)
        if name is None:
            default = part
        else:
            named[name] = part
    return default, named


_FORMS = {"argmax": "OUTPUT[:AXIS]", "topk": "OUTPUT:K[:AXIS]", **{k: "[OUTPUT:]VALUE" for k in SCALARS}}


def _spec(key: str, text: str) -> tuple[str | None, Any]:
    """``"[OUTPUT:]VALUE"`` (the last colon splits; ``argmax`` ``OUTPUT[:AXIS]``, ``topk`` ``OUTPUT:K[:AXIS]``)."""
    parts = text.rsplit(":", 2)
    integer = re.compile(r"[+-]?\d+")
    if key == "argmax":
        name, _, axis = text.rpartition(":")
        return (name, int(axis)) if name and integer.fullmatch(axis) else (text, -1)
    if key == "topk":
        if len(parts) == 3 and parts[0] and integer.fullmatch(parts[1]) and integer.fullmatch(parts[2]):
            return parts[0], (int(parts[1]), int(parts[2]))
        name, _, k = text.rpartition(":")
        if not name or not integer.fullmatch(k):
            raise UsageError(f"topk {text!r}: give OUTPUT:K[:AXIS]")
        return name, (int(k), -1)
    name, _, value = text.rpartition(":")
    if key == "error_stat":
        return name or None, value
    try:
        return name or None, float(value)
    except ValueError:
        raise UsageError(f"{key} {text!r} is not a number: give VALUE or OUTPUT:VALUE") from None

def statistic(values: np.ndarray, stat: str) -> float:
    """``max``, ``mean``, ``median`` or ``pNN`` (the NN-th percentile) of ``values`` (0 for none)."""
    if values.size == 0:
        return 0.0
    if stat == "max":
        return float(values.max())
    if stat == "mean":
        return float(values.mean())
    q = 50.0 if stat == "median" else float(stat[1:])
    return float(np.percentile(values, q))


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """``x`` with ``axis`` last, as (positions, values along it), in float64."""
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    return x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)


def argmax_differs(actual: np.ndarray, reference: np.ndarray, axis: int, tie: float) -> tuple[int, int]:
    """(positions whose argmax along ``axis`` is not the reference's nor tied with it, positions)."""
    a, b = _rows(actual, axis), _rows(reference, axis)
    if b.shape[-1] == 0:
        return 0, 0
    picked = np.take_along_axis(b, np.argmax(a, axis=-1)[:, None], axis=-1)[:, 0]
    top = b.max(axis=-1)
    ok = picked >= top - tie * np.abs(top)
    return int((~ok).sum()), int(ok.size)


def topk_differs(actual: np.ndarray, reference: np.ndarray, k: int, axis: int, tie: float) -> tuple[int, int]:
    """(positions whose top-``k`` index set along ``axis`` is not the reference's, ties at the K-th accepted,
    positions)."""
    a, b = _rows(actual, axis), _rows(reference, axis)
    k = min(k, b.shape[-1])
    if k == 0:
        return 0, 0
    chosen = np.argpartition(-a, k - 1, axis=-1)[:, :k]
    kth = -np.partition(-b, k - 1, axis=-1)[:, k - 1]
    ok = (np.take_along_axis(b, chosen, axis=-1) >= (kth - tie * np.abs(kth))[:, None]).all(axis=-1)
    return int((~ok).sum()), int(ok.size)


@contextmanager
def for_output_named(name: str | None) -> Iterator[None]:
    """A value's ``UsageError`` naming the output whose value it is (``atol -1: give ...`` stays first)."""
    try:
        yield
    except UsageError as exc:
        if name is None or "for output" in str(exc):
            raise
        raise UsageError(f"{exc} (for output {name!r})") from None


def picklable(accept) -> None:
    """A ``UsageError`` when ``accept`` cannot go to worker processes or Ray tasks (they take it pickled)."""
    try:
        pickle.dumps(accept)
    except Exception as exc:
        raise UsageError(f"the accept function cannot go to parallel workers ({type(exc).__name__}: {exc}): "
                         "define it at a module's top level (no lambda or closure), or run serially") from None
