"""What the Python API accepts, turned into what the pipeline takes: model files, sample entries, override files
and a ``Listener``; each bad value a ``UsageError`` saying how to fix it (the options check themselves: the records
of ``run/options.py``)."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, TypeGuard, Union

from fp16bisect.errors import UsageError
from fp16bisect.algorithm.search import Step
from fp16bisect.report.console import step_line
from fp16bisect.run.outcome import Listener

if TYPE_CHECKING:
    import onnx  # only when a ModelProto is given (model_file)

    from fp16bisect.api.results import SearchResult

# What the public functions take (each checked here: anything else is a UsageError, whatever a caller's types say).
Model = Union[str, os.PathLike, "onnx.ModelProto"]
Samples = Union[str, os.PathLike, Mapping, Iterable]  # a path, a dict of arrays, or an iterable of those
OverridesGiven = Union[str, os.PathLike, Mapping, "SearchResult", None]  # a path, the JSON as a dict, a result
Progress = Union[Callable[[str], None], Listener, None]

# The name a model given as an onnx.ModelProto has in the override JSON and its exported commands.
IN_MEMORY_MODEL = "model.onnx"
_PROTOBUF_LIMIT = 2**31 - 1  # a model this large is saved with its weights in a file beside it


def is_path(value: object) -> TypeGuard[str | os.PathLike]:
    return isinstance(value, (str, os.PathLike))


@contextmanager
def model_file(model: object) -> Iterator[str]:
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


def sample_entries(samples: object, what: str = "samples") -> list:
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
        if not isinstance(samples, Iterable):
            raise TypeError
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
def overrides_file(overrides: object) -> Iterator[str | None]:
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


class _Lines(Listener):
    """A ``Listener`` that hands each event to a function as one line of text."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write

    def stage(self, text: str) -> None:
        self.write(text)

    def step(self, step: Step, progress: dict) -> None:
        self.write(step_line(step, progress))


def listener(progress: Progress) -> Listener:
    """``progress``: None (silent), a ``Listener``, or a function taking one line of text per event."""
    if progress is None:
        return Listener()
    if isinstance(progress, Listener):
        return progress
    if callable(progress):
        return _Lines(progress)
    raise UsageError(f"progress is a {type(progress).__name__}: pass a function taking one line of text (e.g. "
                     "print), or None")
