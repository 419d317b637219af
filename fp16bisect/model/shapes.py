"""Input shapes: the deployment profile (``--min-shapes/--opt-shapes/--max-shapes``, trtexec's syntax) checked
against the model and the samples, and which range of each dynamic input dimension the samples covered.

A profile is input name -> (min, opt, max) shapes, what a TensorRT optimisation profile takes. The samples'
own span (``samples.sample_shapes``) is the profile when none is given; a given one names some inputs (the others
take the samples' span) and must hold every sample's shape. A search's answer holds on the shapes its samples
had: where the profile's maximum is larger than any sample's, an overflow that grows with that dimension
(sequence length, image size) was not tested, and ``untested`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping

from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph
from fp16bisect.model.samples import sample_shapes

FLAGS = ("--min-shapes", "--opt-shapes", "--max-shapes")
EXAMPLE = "name:1x3x224x224,other:1x8"


def parse(text: str, flag: str = "--max-shapes") -> dict[str, tuple[int, ...]]:
    """``name:1x3x224x224,other:1x8`` -> {name: (1, 3, 224, 224), other: (1, 8)} (a name may hold ':': the last
    one separates it from the shape); ValueError with what is wrong."""
    found: dict[str, tuple[int, ...]] = {}
    for part in (p.strip() for p in str(text).split(",")):
        name, sep, dims = part.rpartition(":")
        name = name.strip().strip("'\"")
        if not sep or not name or not dims.strip():
            raise ValueError(f"{flag} {part!r} is not name:shape (e.g. {EXAMPLE})")
        try:
            shape = tuple(int(d) for d in dims.strip().lower().split("x"))
        except ValueError:
            raise ValueError(f"{flag} {part!r}: the shape {dims!r} is not whole numbers joined by x "
                             f"(e.g. {EXAMPLE})") from None
        if any(d < 1 for d in shape):
            raise ValueError(f"{flag} {part!r}: every dimension must be 1 or more")
        if name in found:
            raise ValueError(f"{flag} names input {name!r} twice")
        found[name] = shape
    return found


def profile_of(min_shapes=None, opt_shapes=None, max_shapes=None) -> dict[str, tuple] | None:
    """The deployment profile as the command line (``--min-shapes/--opt-shapes/--max-shapes``), the Python API and
    batch manifests (``min_shapes=``, ...) give it: each None, trtexec's text (``name:1x3x224x224,other:1x8``)
    or a mapping {input name: shape} (a shape as ``"1x3x224x224"`` or a list of whole numbers). Checked here
    once: anything wrong is a ``UsageError``, the same line everywhere. None: no profile given."""
    return combine(*(_given(value, flag) for value, flag in zip((min_shapes, opt_shapes, max_shapes), FLAGS)))


def _given(value, flag: str) -> dict | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        try:
            value = ",".join(f"{name}:{dims if isinstance(dims, str) else 'x'.join(map(_whole, dims))}"
                             for name, dims in value.items())
        except TypeError:
            value = None
    if not isinstance(value, str):
        raise UsageError(f"{flag} must be name:shape text (e.g. {EXAMPLE}) or a mapping {{input name: shape}}")
    try:
        return parse(value, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _whole(dim) -> str:
    """A dimension of a shape given as a list: a whole number (anything else fails in ``parse``)."""
    return str(dim) if isinstance(dim, int) and not isinstance(dim, bool) else repr(dim)


def combine(low: dict | None, opt: dict | None, high: dict | None) -> dict[str, tuple] | None:
    """The profile the three flags give (None: none given). As trtexec: an input given only --opt-shapes has
    min = max = opt; one given --min-shapes and --max-shapes without --opt-shapes optimises for the max."""
    low, opt, high = low or {}, opt or {}, high or {}
    if not (low or opt or high):
        return None
    profile = {}
    for name in dict.fromkeys([*low, *opt, *high]):
        if (name in low) != (name in high):
            given, missing = ("--min-shapes", "--max-shapes") if name in low else ("--max-shapes", "--min-shapes")
            raise UsageError(f"input {name!r} has {given} but no {missing}: give both (and optionally "
                             "--opt-shapes), as trtexec takes them")
        a, b, c = (low.get(name), opt.get(name), high.get(name))
        a, c = (a, c) if a is not None else (b, b)
        b = b if b is not None else c
        assert a is not None and b is not None and c is not None  # the name is in one of them, so all are set
        if not len(a) == len(b) == len(c):
            raise UsageError(f"input {name!r} has shapes of different ranks in {', '.join(FLAGS)}: "
                             f"{_text(a)}, {_text(b)}, {_text(c)}; give one rank")
        if not all(x <= y <= z for x, y, z in zip(a, b, c)):
            raise UsageError(f"input {name!r}: need min <= opt <= max in every dimension, got min {_text(a)}, "
                             f"opt {_text(b)}, max {_text(c)}")
        profile[name] = (a, b, c)
    return profile


def deployment_profile(graph: Graph, given: dict, samples) -> dict[str, tuple]:
    """``given`` checked against the model and the samples, the inputs it does not name taking the samples' span."""
    specs = {s.name: s for s in graph.inputs}
    span = sample_shapes(samples)
    for name, (low, opt, high) in given.items():
        if name not in specs:
            raise UsageError(f"{', '.join(FLAGS)} name input {name!r}, which the model does not have: its inputs are "
                             f"{', '.join(specs)}")
        declared = specs[name].shape
        if declared is not None:
            if len(declared) != len(high):
                raise UsageError(f"input {name!r} has rank {len(declared)} {_declared(declared)}, but "
                                 f"{', '.join(FLAGS)} give rank {len(high)}: give one size per dimension")
            fixed = [i for i, d in enumerate(declared) if isinstance(d, int) and d > 0
                     and not low[i] == high[i] == d]
            if fixed:
                raise UsageError(f"input {name!r} has fixed dimension {fixed[0]} = {declared[fixed[0]]} "
                                 f"{_declared(declared)}: give that size in {', '.join(FLAGS)}")
        for sample in samples:
            shape = tuple(sample.shapes.get(name, ()))
            if len(shape) != len(low) or not all(x <= s <= z for x, s, z in zip(low, shape, high)):
                raise UsageError(f"sample {sample.source!r} has input {name!r} of shape {_text(shape)}, outside the "
                                 f"profile (min {_text(low)}, max {_text(high)}): widen --min-shapes/--max-shapes "
                                 "or drop that sample")
    return {**span, **given}


def coverage(graph: Graph, samples, profile: dict | None = None) -> dict[str, list[dict]]:
    """Per input with dynamic dimensions (declared symbolic or unknown): for each such dimension its name in
    the model (when it has one), the [min, max] the samples covered and, with a deployment ``profile``, that
    profile's [min, opt, max]."""
    span = sample_shapes(samples)
    found: dict[str, list[dict]] = {}
    for spec in graph.inputs:
        if spec.shape is None or spec.name not in span:
            continue
        low, _opt, high = span[spec.name]
        for i, dim in enumerate(spec.shape):
            if isinstance(dim, int) and dim > 0:
                continue
            entry = {"dim": i, **({"name": dim} if isinstance(dim, str) and dim else {}),
                     "covered": [int(low[i]), int(high[i])]}
            if profile and spec.name in profile:
                entry["profile"] = [int(s[i]) for s in profile[spec.name]]
            found.setdefault(spec.name, []).append(entry)
    return found


def said(shapes: dict[str, list[dict]]) -> tuple[list[str], list[str]]:
    """What a result says of its shapes: the line of the dynamic dimensions the samples covered (none without
    any), and the ``untested`` warnings."""
    covered = []
    for name, dims in shapes.items():
        for d in dims:
            low, high = d["covered"]
            deployed = f"; profile {d['profile'][0]}..{d['profile'][2]}" if "profile" in d else ""
            called = f" ({d['name']})" if "name" in d else ""
            covered.append(f"{name}[{d['dim']}]{called}: {low}..{high}{deployed}")
    return ([f"verified on input shapes: {', '.join(covered)}"] if covered else []), untested(shapes)


def untested(shapes: dict[str, list[dict]]) -> list[str]:
    """One line per dynamic dimension whose profile maximum no sample reached."""
    lines = []
    for name, dims in shapes.items():
        for d in dims:
            if "profile" in d and d["covered"][1] < d["profile"][2]:
                called = f" ({d['name']})" if "name" in d else ""
                lines.append(f"no sample reaches the maximum of input {name!r} dimension {d['dim']}{called}: "
                             f"--max-shapes says {d['profile'][2]}, the samples reach {d['covered'][1]}; an "
                             "overflow that grows with it is untested: add samples at the maximum shape")
    return lines


def _text(shape) -> str:
    return "x".join(map(str, shape)) if shape else "()"


def _declared(shape) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in shape) + "]"
