"""Samples in Polygraphy's forms: a data-loader script, and the JSON of ``polygraphy run --save-inputs/--save-outputs``.

Each reader yields one dict of name -> array per sample, in order. The script needs nothing but itself
(``FUNC()`` is called and iterated, as ``polygraphy run --data-loader-script FILE.py[:FUNC]`` does); the JSON files
are read through Polygraphy (``polygraphy.json.load_json`` for inputs, a list of feed dicts;
``polygraphy.comparator.RunResults.load`` for outputs), which ``pip install polygraphy`` (or the tensorrt extra)
provides.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from fp16bisect.errors import UsageError
from fp16bisect.model.npz import one_line

INSTALL = "pip install polygraphy (or pip install 'fp16bisect[tensorrt]')"
_modules = itertools.count()


def script_samples(path: str, function: str) -> Iterator[dict[str, np.ndarray]]:
    """The feed dicts ``function`` in the script at ``path`` yields."""
    what = f"data-loader script {path!r}"
    if not Path(path).is_file():
        raise UsageError(f"{what} not found: pass FILE.py[:FUNC], FUNC (default load_data) yielding feed dicts")
    spec = importlib.util.spec_from_file_location(f"fp16bisect_data_loader_{next(_modules)}", path)
    assert spec is not None and spec.loader is not None  # a .py file: sources.py lets no other name through
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's script: its error, said in one line
        raise UsageError(f"{what} failed to load ({type(exc).__name__}: {one_line(exc)}): fix the script") from None
    loader = getattr(module, function, None)
    if not callable(loader):
        raise UsageError(f"{what} has no function {function!r}: define {function}() yielding one dict of input "
                         f"name -> array per sample, or name the function as {path}:FUNC")
    try:
        items = iter(loader())
        while True:
            try:
                item = next(items)
            except StopIteration:
                return
            yield _feed(item, f"{what} ({function})")
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"{what}: {function}() raised {type(exc).__name__}: {one_line(exc)}: fix the script") \
            from None


def json_inputs(path: str) -> Iterator[dict[str, np.ndarray]]:
    """The feed dicts of a ``polygraphy run --save-inputs`` file."""
    load_json = _polygraphy("polygraphy.json", "load_json", path)
    try:
        data = load_json(path)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - Polygraphy's own error, said in one line
        raise UsageError(f"Polygraphy could not read {path!r} ({one_line(exc)}): pass a file written by "
                         "polygraphy run --save-inputs") from None
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, list):
        raise UsageError(f"{path!r} holds a {type(data).__name__}, not a list of feed dicts: pass a file written by "
                         "polygraphy run --save-inputs")
    for item in data:
        yield _feed(item, repr(path))


def json_outputs(path: str, runner: str = "") -> Iterator[dict[str, np.ndarray]]:
    """The outputs per iteration of one runner of a ``polygraphy run --save-outputs`` file (``runner``: which,
    needed when the file holds several)."""
    RunResults = _polygraphy("polygraphy.comparator", "RunResults", path)
    try:
        results = RunResults.load(path)
        runners = list(results.keys())
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        raise UsageError(f"Polygraphy could not read {path!r} as outputs ({one_line(exc)}): pass a file written by "
                         "polygraphy run --save-outputs") from None
    if not runners:
        raise UsageError(f"{path!r} holds no runner's outputs: pass a file written by polygraphy run --save-outputs")
    if runner and runner not in runners:
        raise UsageError(f"{path!r} has no runner {runner!r}: choose one of {', '.join(runners)} "
                         f"(--reference {path}:RUNNER)")
    if not runner and len(runners) > 1:
        raise UsageError(f"{path!r} holds the outputs of {len(runners)} runners ({', '.join(runners)}): say which "
                         f"is the reference, e.g. --reference {path}:{runners[0]}")
    for iteration in results[runner or runners[0]]:
        yield _feed(dict(iteration.items()), repr(path))


def _polygraphy(module: str, name: str, path: str):
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        raise UsageError(f"{path!r} is Polygraphy JSON, read through Polygraphy, which is not installed: "
                         f"{INSTALL}, or pass .npz files") from None


def _feed(item, what: str) -> dict[str, np.ndarray]:
    if not isinstance(item, Mapping) or not all(isinstance(k, str) for k in item):
        raise UsageError(f"{what} gave a {type(item).__name__}, not a dict of name -> array: yield one dict per "
                         "sample, e.g. {'x': numpy.zeros((1, 3, 224, 224), numpy.float32)}")
    try:
        return {k: np.asarray(v) for k, v in item.items()}
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{what} gave a value that is not an array ({one_line(exc)}): give NumPy arrays") from None
