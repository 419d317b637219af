"""Samples: each knows where its inputs and references are and reads them when used; they are validated
against the model when loaded, and FP32 references computed where none were given.

Where samples come from (files, directories, globs, Polygraphy JSON, data-loader scripts, and how references
pair with inputs): ``model/sources.py``. Arrays a sample reads from an ``.npz`` are read each time they are used
(``model/npz.py`` keeps the last file read), so that a search over many samples holds about one of them in
memory; samples that come from no ``.npz`` of their own (Polygraphy JSON, a data-loader script) and computed FP32
references are written to the model's work directory (one ``.npz`` per sample) and read back the same way. A
sample pickles as its paths (parallel workers read the files); ``held()`` is a copy holding its arrays (Ray
workers on other machines).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from fp16bisect.errors import UsageError
from fp16bisect.model import npz, polygraphy_data, sources
from fp16bisect.model.graph import Graph, TensorSpec
from fp16bisect.model.subgraphs import subgraphs
from fp16bisect.model.runtime import run, session


class Sample:
    """One sample: ``source`` (what to call it in messages), its ``inputs`` and its ``reference`` outputs (None:
    not computed yet). Given as arrays, they are held; given as files (``inputs_file``, ``reference_file``), they
    are read when used. A reference assigned to a sample with a ``spill`` path is written there, not held."""

    def __init__(self, source: str, inputs: dict[str, np.ndarray] | None = None,
                 reference: dict[str, np.ndarray] | None = None, *, inputs_file: str | None = None,
                 reference_file: str | None = None, spill: str | None = None, shapes: dict | None = None):
        if inputs is None and inputs_file is None:
            raise ValueError("a sample needs its inputs or the file that holds them")
        self.source = source
        self._inputs, self.inputs_file = inputs, inputs_file
        self._reference, self.reference_file = reference, reference_file
        self.spill = spill
        self._shapes = shapes

    @property
    def inputs(self) -> dict[str, np.ndarray]:
        if self._inputs is not None:
            return self._inputs
        assert self.inputs_file is not None  # __init__ refuses a sample with neither
        return npz.read(self.inputs_file, "inputs")

    @property
    def reference(self) -> dict[str, np.ndarray] | None:
        if self._reference is not None:
            return self._reference
        return npz.read(self.reference_file, "reference") if self.reference_file else None

    @reference.setter
    def reference(self, value: dict[str, np.ndarray] | None) -> None:
        self._reference, self.reference_file = None, None
        if value is not None and self.spill:
            npz.write(self.spill, value, "reference")
            self.reference_file = self.spill
        else:
            self._reference = value

    @property
    def has_reference(self) -> bool:
        return self._reference is not None or bool(self.reference_file)

    @property
    def shapes(self) -> dict[str, tuple]:
        """Input name -> shape, known without reading the inputs again."""
        if self._shapes is None:
            self._shapes = {k: tuple(np.shape(v)) for k, v in self.inputs.items()}
        return self._shapes

    def keep(self) -> None:
        """Hold in memory the arrays written to the work directory (a Python API call removes that directory when
        it returns; its result's samples stay usable); those in the user's own files are still read from them."""
        mine = lambda path: bool(path and self.spill and Path(path).parent == Path(self.spill).parent)  # noqa: E731
        if mine(self.inputs_file):
            self._inputs, self.inputs_file = dict(self.inputs), None
        if mine(self.reference_file):
            self._reference, self.reference_file = self.reference, None
        self.spill = None

    def held(self) -> "Sample":
        """A copy holding its arrays (for a worker that cannot read this machine's files)."""
        return Sample(self.source, dict(self.inputs), self.reference, shapes=self.shapes)

    def __repr__(self) -> str:
        return f"Sample({self.source!r})"


def update_digest(digest, arrays: dict[str, np.ndarray]) -> None:
    """Feed named arrays (names, dtypes, shapes, bytes) to a hashlib digest, in name order."""
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode("utf-8"))
        digest.update(array.tobytes())


def load_samples(graph: Graph, input_paths: list, reference_paths: list | None = None) -> list[Sample]:
    """The samples ``input_paths`` give (files, directories, globs, Polygraphy JSON, data-loader scripts, or a
    mapping of input name -> array: a sample in memory, named ``sample <i>`` in messages), with the references
    ``reference_paths`` give (likewise), each validated against the model's inputs and outputs (names, dtypes,
    ranks, fixed dimensions, NaN) as it is read."""
    if not input_paths:
        raise UsageError("no inputs given: pass --inputs FILE.npz with one array per model input (or a directory, "
                         "a quoted glob, Polygraphy JSON, or --data-loader-script FILE.py)")
    groups = sources.pair(input_paths, reference_paths or [])
    folder = _work_folder(graph)
    samples: list[Sample] = []
    for given, refs in groups:
        made = [_sample(graph, name, arrays, folder, len(samples) + i)
                for i, (name, arrays) in enumerate(_read_all(given, _read_inputs))]
        if refs:
            _attach(graph, made, refs, folder, len(samples))
        samples += made
    if not samples:
        raise UsageError(f"{', '.join(map(str, input_paths))} gave no sample: give at least one")
    return samples


def _work_folder(graph: Graph) -> Path | None:
    """Where samples that are not in an .npz of their own, and computed references, are written: a folder in
    the model's work directory (None for a model built in memory: they are held)."""
    store = graph.store
    return None if store is None else Path(tempfile.mkdtemp(prefix="samples-", dir=store.directory))


def _read_all(given: list, read) -> Iterator[tuple[str, dict | None]]:
    """(what to call it, arrays or None for an .npz read later) for each sample the sources give, in order."""
    for source in given:
        yield from read(source)


def _read_inputs(source: sources.Source):
    if source.kind == "npz":
        yield source.path, None
    elif source.kind == "memory":
        yield source.path, {str(k): np.asarray(v) for k, v in (source.arrays or {}).items()}
    elif source.kind == "script":
        for k, arrays in enumerate(polygraphy_data.script_samples(source.path, source.function)):
            yield f"{source}[{k}]", arrays
    else:
        for k, arrays in enumerate(polygraphy_data.json_inputs(source.path)):
            yield f"{source.path}[{k}]", arrays


def _read_references(source: sources.Source):
    if source.kind == "npz":
        yield source.path, None
    elif source.kind == "memory":
        yield source.path, {str(k): np.asarray(v) for k, v in (source.arrays or {}).items()}
    else:
        for k, arrays in enumerate(polygraphy_data.json_outputs(source.path, source.function)):
            yield f"{source}[{k}]", arrays


def _sample(graph: Graph, name: str, arrays: dict | None, folder: Path | None, index: int) -> Sample:
    """A checked sample: an .npz read lazily, or arrays written to ``folder`` (held without one)."""
    spill = str(folder / f"{index}.fp32.npz") if folder is not None else None
    if arrays is None:
        arrays = npz.read(name, "inputs")  # kept among the recent files: the profile reads it next
        _check_inputs(graph, arrays, name)
        return Sample(name, inputs_file=name, spill=spill, shapes={k: v.shape for k, v in arrays.items()})
    _check_inputs(graph, arrays, name)
    shapes = {k: v.shape for k, v in arrays.items()}
    if folder is None:
        return Sample(name, arrays, spill=spill, shapes=shapes)
    npz.write(folder / f"{index}.inputs.npz", arrays, "inputs")
    return Sample(name, inputs_file=str(folder / f"{index}.inputs.npz"), spill=spill, shapes=shapes)


def _attach(graph: Graph, made: list[Sample], refs: list, folder: Path | None, start: int) -> None:
    """Give the samples ``made`` the references ``refs`` hold, sample by sample."""
    count = 0
    for count, (name, arrays) in enumerate(_read_all(refs, _read_references), 1):
        if count > len(made):
            continue
        sample = made[count - 1]
        if arrays is None:
            _check_reference(graph, npz.read(name, "reference"), name)
            sample.reference_file = name
            continue
        _check_reference(graph, arrays, name)
        if folder is None:
            sample.reference = arrays
        else:
            sample.reference_file = str(folder / f"{start + count - 1}.reference.npz")
            npz.write(sample.reference_file, arrays, "reference")
    if count != len(made):
        said = ", ".join(map(str, refs))
        raise UsageError(f"--reference {said} gives {count} sample(s) but the inputs give {len(made)}: pass one "
                         "reference per sample, in the same order")


def _check_inputs(graph: Graph, arrays: dict[str, np.ndarray], path: str) -> None:
    expected = {spec.name: spec for spec in graph.inputs}
    missing = [n for n in expected if n not in arrays]
    extra = [n for n in arrays if n not in expected]
    if missing:
        raise UsageError(
            f"{path!r} has no array for model input(s) {', '.join(map(repr, missing))}: "
            f"save one per input ({', '.join(map(repr, expected))})"
        )
    if extra:
        raise UsageError(
            f"{path!r} has array(s) {', '.join(map(repr, extra))} that are not model inputs: "
            f"keep only {', '.join(map(repr, expected))}"
        )
    for name, spec in expected.items():
        _check_array(arrays[name], spec, f"input {name!r} in {path!r}")
    nan = [n for n in expected if arrays[n].dtype.kind in "fc" and np.isnan(arrays[n]).any()]
    if nan and not _tests_for_nan(graph.model.graph):
        count = int(np.isnan(arrays[nan[0]]).sum())
        raise UsageError(
            f"input {nan[0]!r} in {path!r} contains {count} NaN value(s), and the model has no IsNaN to handle "
            "them: pass the inputs the model is meant to see (replace NaN, e.g. with numpy.nan_to_num)"
        )


def _tests_for_nan(graph: onnx.GraphProto) -> bool:
    """Does the model look for NaN itself (IsNaN, in the graph or a subgraph)? Then NaN inputs are data."""
    for node in graph.node:
        if node.op_type == "IsNaN":
            return True
        if any(_tests_for_nan(g) for g in subgraphs(node)):
            return True
    return False


def _nonfinite_inputs(sample: "Sample") -> list[str]:
    return [k for k, v in sample.inputs.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]


def _check_reference(graph: Graph, arrays: dict[str, np.ndarray], path: str) -> None:
    for spec in graph.outputs:
        if spec.name not in arrays:
            raise UsageError(
                f"reference {path!r} has no array for model output {spec.name!r}: save one per output"
            )
        ref = arrays[spec.name]
        _check_array(ref, spec, f"reference for output {spec.name!r} in {path!r}")
        if ref.dtype.kind == "f" and np.isnan(ref).any():
            raise UsageError(
                f"reference for output {spec.name!r} in {path!r} contains NaN: compute the reference again"
            )


def _check_array(array: np.ndarray, spec: TensorSpec, what: str) -> None:
    want = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(spec.elem_type)) if spec.elem_type else None
    if want is not None and array.dtype != want:
        raise UsageError(f"{what} is {array.dtype}, the model expects {want}: convert it with .astype({want.name})")
    if spec.shape is None:
        return
    if array.ndim != len(spec.shape):
        raise UsageError(
            f"{what} has rank {array.ndim} (shape {tuple(array.shape)}), the model expects rank "
            f"{len(spec.shape)} {_shape_text(spec.shape)}: reshape it"
        )
    for got, dim in zip(array.shape, spec.shape):
        if isinstance(dim, int) and dim > 0 and got != dim:
            raise UsageError(
                f"{what} has shape {tuple(array.shape)}, the model expects {_shape_text(spec.shape)}: reshape it"
            )


def _shape_text(shape: tuple) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def add_fp32_references(graph: Graph, samples: list[Sample], computed: Sequence[Sample] = ()) -> None:
    """Reference outputs from an FP32 ONNX Runtime run of the original model, where none were given; those and
    the ``computed`` ones (the FP32 profile's run gives them) are checked."""
    todo = [s for s in samples if not s.has_reference]
    if todo:
        sess = session(graph.runnable_copy())
        names = [o.name for o in graph.outputs]
        for s in todo:
            outputs = dict(zip(names, run(sess, names, s.inputs, f"the model in FP32 on {s.source!r}")))
            _check_computed(s, outputs)  # before it is written to the work directory
            s.reference = outputs
    done = {id(s) for s in todo}
    for s in (c for c in computed if id(c) not in done):
        _check_computed(s, s.reference or {})


def _check_computed(sample: Sample, reference: dict[str, np.ndarray]) -> None:
    for name, value in reference.items():
        if np.issubdtype(value.dtype, np.floating) and np.isnan(value).any():
            bad = _nonfinite_inputs(sample)
            cause = f" (input {bad[0]!r} holds NaN or inf values, which the model does not mask)" if bad else ""
            raise UsageError(
                f"the FP32 reference for output {name!r} contains NaN on {sample.source!r}{cause}: "
                "check the inputs, or pass --reference"
            )


def sample_shapes(samples: Iterable[Sample | Mapping[str, np.ndarray]]) -> dict[str, tuple]:
    """input -> (min, opt, max) over the samples' shapes (opt: the first sample's); samples or their inputs."""
    seen: dict[str, list] = {}
    for sample in samples:
        shapes = sample.shapes if isinstance(sample, Sample) else {k: np.shape(v) for k, v in sample.items()}
        for name, shape in shapes.items():
            seen.setdefault(name, []).append(tuple(shape))
    return {
        name: (tuple(map(min, zip(*found))), found[0], tuple(map(max, zip(*found))))
        for name, found in seen.items()
        if len({len(s) for s in found}) == 1
    }
