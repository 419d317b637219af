"""What the Python API accepts, turned into what the pipeline takes: model files, sample entries, override files,
a tolerance, backend options and a ``Listener``; each bad value a ``UsageError`` saying how to fix it."""

from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping

from fp16bisect.backends import NAMES, Options, declared
from fp16bisect.errors import UsageError
from fp16bisect.report.console import step_line
from fp16bisect.run.outcome import Listener
from fp16bisect.tolerance import Tolerance

# The name a model given as an onnx.ModelProto has in the override JSON and its exported commands.
IN_MEMORY_MODEL = "model.onnx"
_PROTOBUF_LIMIT = 2**31 - 1  # a model this large is saved with its weights in a file beside it


def is_path(value) -> bool:
    return isinstance(value, (str, os.PathLike))


@contextmanager
def model_file(model) -> Iterator[str]:
    """The model's path: ``model`` itself, or an ``onnx.ModelProto`` saved to a temporary file (removed after)."""
    if is_path(model):
        yield str(model)
        return
    import onnx

    if not isinstance(model, onnx.ModelProto):
        raise UsageError(f"model is a {type(model).__name__}: pass the path of an .onnx file or an onnx.ModelProto")
    with tempfile.TemporaryDirectory(prefix="fp16bisect-model-") as folder:
        path = os.path.join(folder, IN_MEMORY_MODEL)
        big = model.ByteSize() > _PROTOBUF_LIMIT
        onnx.save_model(model, path, save_as_external_data=big, location=f"{IN_MEMORY_MODEL}.data" if big else None)
        yield path


def sample_entries(samples, what: str = "samples") -> list:
    """``samples`` as ``load_samples`` takes them: paths (an .npz, a directory: every ``*.npz`` in it, sorted by
    name; a glob; Polygraphy JSON; a data-loader script) and dicts of arrays (one sample each); a list or any
    iterable, one per item."""
    if samples is None:
        raise UsageError(f"no {what} given: pass an .npz path, a directory of them, a dict of arrays or a list")
    if isinstance(samples, Mapping) or is_path(samples):
        samples = [samples]
    elif isinstance(samples, (bytes, bytearray)) or hasattr(samples, "dtype"):
        raise UsageError(f"{what} is a {type(samples).__name__}: pass a dict {{input name: array}} per sample, "
                         "an .npz path, a directory of .npz files or a list of them")
    try:
        given = list(samples)
    except TypeError:
        raise UsageError(f"{what} is a {type(samples).__name__}: pass an .npz path, a directory of them, a dict "
                         "{input name: array} or a list of those") from None
    entries: list = []
    for i, entry in enumerate(given):
        if isinstance(entry, Mapping):
            entries.append(entry)
        elif is_path(entry):
            entries.append(str(entry))  # a file, directory or glob: load_samples reads it (model/sources.py)
        else:
            raise UsageError(f"{what}[{i}] is a {type(entry).__name__}: give each sample as an .npz path or a dict "
                             "{input name: array}")
    if not entries:
        raise UsageError(f"no {what} given: the list is empty; pass at least one sample")
    return entries


@contextmanager
def overrides_file(overrides) -> Iterator[str | None]:
    """The override file's path: a path as it is, or a search result (or the override JSON as a dict) written to
    a temporary file removed after; None stays None."""
    if overrides is None or is_path(overrides):
        yield None if overrides is None else str(overrides)
        return
    data = overrides.to_dict() if hasattr(overrides, "to_dict") else overrides
    data = data.to_json() if hasattr(data, "to_json") else data  # an Overrides record (artifacts/overrides.py)
    if not isinstance(data, Mapping):
        raise UsageError(f"overrides is a {type(overrides).__name__}: pass an override JSON path, a search result "
                         "or its to_dict()")
    with tempfile.TemporaryDirectory(prefix="fp16bisect-overrides-") as folder:
        path = os.path.join(folder, "overrides.json")
        Path(path).write_text(json.dumps(dict(data), indent=2) + "\n")
        yield path


def tolerance(atol=None, rtol=None, min_cosine=None, max_mismatch=None, *, fallback: Tolerance | None = None
              ) -> Tolerance:
    """The tolerance; each value left None is ``fallback``'s (default: ``Tolerance()``)."""
    fallback = fallback or Tolerance()
    for name, value in (("atol", atol), ("rtol", rtol), ("max_mismatch", max_mismatch)):
        if value is not None and not (_number(value) and value >= 0 and math.isfinite(value)):
            raise UsageError(f"{name}={value!r}: give a finite number >= 0")
    if max_mismatch is not None and max_mismatch > 1:
        raise UsageError(f"max_mismatch={max_mismatch!r} is a fraction of elements: give a number from 0 to 1")
    if min_cosine is not None and not (_number(min_cosine) and -1 <= min_cosine <= 1):
        raise UsageError(f"min_cosine={min_cosine!r}: give a cosine similarity from -1 to 1")
    given = {"atol": atol, "rtol": rtol, "min_cosine": min_cosine, "max_mismatch": max_mismatch}
    return Tolerance(**{k: float(v) if v is not None else getattr(fallback, k) for k, v in given.items()})


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def backend_options(backend: str, check: str | None = None, *, keep_plans: bool = False, typing: str = "strong",
                    opt_level: int | None = None, timing_cache: str | None = None,
                    plans_dir: str | None = None, input_shapes: dict | None = None) -> Options:
    """The backend's options; an option of one backend given for another is a usage error. ``input_shapes``:
    the deployment's profile, already checked (``model.shapes.profile_of``)."""
    if backend not in NAMES:
        raise UsageError(f"unknown backend {backend!r}: use one of {', '.join(map(repr, NAMES))}")
    if declared(backend).runs_a_command and not check:
        raise UsageError("backend='command' needs the command that judges a plan: pass check='CMD' "
                         "(e.g. check='python judge.py {model} {inputs} {outputs}')")
    if check and not declared(backend).runs_a_command:
        raise UsageError(f"check= is the command of backend='command', not of backend={backend!r}: pass "
                         "backend='command', or drop check")
    if keep_plans and not declared(backend).runs_a_command:
        raise UsageError("keep_plans keeps the plan files of backend='command': pass backend='command' and check, "
                         "or drop keep_plans")
    if typing not in ("strong", "weak"):
        raise UsageError(f"typing={typing!r}: use 'strong' or 'weak'")
    if opt_level is not None and opt_level not in range(6):
        raise UsageError(f"opt_level={opt_level!r}: give a TensorRT builder optimisation level from 0 to 5")
    return Options.of(opt_level=opt_level, timing_cache=timing_cache, command=check, keep_plans=keep_plans,
                      typing=typing, plans_dir=plans_dir, input_shapes=input_shapes)


def parallel(jobs: int = 1, devices=None, ray: str | None = None):
    """How many plans are evaluated at once, and where (``devices``: GPU ids, a list or ``"0,1"``)."""
    from fp16bisect.parallel import Parallel, parse_devices

    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise UsageError(f"jobs={jobs!r}: give the number of evaluations to run at once, 1 or more")
    if ray is not None:
        from fp16bisect.parallel.ray import load_ray

        load_ray()  # how to install it, before any work
    chosen = parse_devices(devices if devices is None or isinstance(devices, str) else ",".join(map(str, devices)))
    return Parallel(jobs=jobs, devices=chosen, ray=ray)


class _Lines(Listener):
    """A ``Listener`` that hands each event to a function as one line of text."""

    def __init__(self, write: Callable[[str], None]):
        self.write = write

    def stage(self, text: str) -> None:
        self.write(text)

    def step(self, step, progress: dict) -> None:
        self.write(step_line(step, progress))


def listener(progress) -> Listener:
    """``progress``: None (silent), a ``Listener``, or a function taking one line of text per event."""
    if progress is None:
        return Listener()
    if isinstance(progress, Listener):
        return progress
    if callable(progress):
        return _Lines(progress)
    raise UsageError(f"progress is a {type(progress).__name__}: pass a function taking one line of text (e.g. "
                     "print), or None")
