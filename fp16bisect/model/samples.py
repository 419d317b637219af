"""Read and validate ``.npz`` inputs and references; compute FP32 references."""

from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass
from typing import Iterable, Mapping
from pathlib import Path

import numpy as np
import onnx

from fp16bisect.errors import UsageError
from fp16bisect.model.graph import Graph, TensorSpec
from fp16bisect.model.subgraphs import subgraphs
from fp16bisect.model.runtime import run, session


@dataclass
class Sample:
    source: str  # the npz it came from
    inputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray] | None = None


def update_digest(digest, arrays: dict[str, np.ndarray]) -> None:
    """Feed named arrays (names, dtypes, shapes, bytes) to a hashlib digest, in name order."""
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode("utf-8"))
        digest.update(array.tobytes())


def load_samples(graph: Graph, input_paths: list, reference_paths: list | None = None) -> list[Sample]:
    """One ``Sample`` per entry of ``input_paths``: an ``.npz`` path, or a mapping of input name -> array (a sample
    in memory, named ``sample <i>`` in messages); ``reference_paths`` likewise, one per sample. Every entry is
    validated against the model's inputs and outputs (names, dtypes, ranks, fixed dimensions, NaN)."""
    if not input_paths:
        raise UsageError("no inputs given: pass --inputs FILE.npz with one array per model input")
    reference_paths = reference_paths or []
    if reference_paths and len(reference_paths) != len(input_paths):
        raise UsageError(
            f"{len(input_paths)} --inputs file(s) but {len(reference_paths)} --reference file(s): "
            "pass one reference per inputs file, in the same order"
        )
    samples = []
    for i, path in enumerate(input_paths):
        source, arrays = _read(path, f"sample {i}")
        _check_inputs(graph, arrays, source)
        ref = None
        if reference_paths:
            where, ref = _read(reference_paths[i], f"reference {i}")
            _check_reference(graph, ref, where)
        samples.append(Sample(source, arrays, ref))
    return samples


def _read(entry, label: str) -> tuple[str, dict[str, np.ndarray]]:
    """(its name in messages, its arrays): an npz file read, or a mapping given in memory taken as it is."""
    if isinstance(entry, Mapping):
        return label, {str(k): np.asarray(v) for k, v in entry.items()}
    return str(entry), _read_npz(entry)


def _read_npz(path: str) -> dict[str, np.ndarray]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"file {path!r} not found: pass an .npz made with numpy.savez(path, name=array, ...)")
    try:
        with p.open("rb") as f:
            head = f.read(6)
        if head == b"\x93NUMPY":
            raise ValueError("it holds a single .npy array, not an .npz archive of named arrays")
        if not head:
            raise ValueError("the file is empty")
        if not head.startswith(b"PK"):
            raise ValueError("not a zip archive of .npy arrays")
        _check_members(p)
        data = np.load(p, allow_pickle=False)
        with data:
            return {k: np.asarray(data[k]) for k in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, KeyError, NotImplementedError,
            RuntimeError, MemoryError) as exc:
        raise UsageError(
            f"{path!r} is not a readable .npz ({_one_line(exc)}): write it with numpy.savez(path, name=array, ...)"
        ) from None


def _check_members(path: Path) -> None:
    """Read each array's header first: refuse object arrays and arrays that declare more data than the archive
    holds (a truncated or corrupt file), before numpy allocates them."""
    fmt = np.lib.format
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                continue
            name = info.filename[:-4]
            with archive.open(info) as f:
                version = fmt.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = fmt.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, _, dtype = fmt.read_array_header_2_0(f)
                else:  # newer header versions: numpy checks them itself
                    continue
                if dtype.hasobject:
                    raise ValueError(f"array {name!r} holds Python objects; save numeric arrays")
                declared = math.prod(shape) * dtype.itemsize
                if declared > info.file_size - f.tell():
                    raise ValueError(
                        f"array {name!r} declares shape {tuple(shape)} ({declared} bytes) but holds "
                        f"{max(info.file_size - f.tell(), 0)}: the file is truncated or corrupt"
                    )


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:300] + "...") if len(text) > 300 else (text or type(exc).__name__)


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


def add_fp32_references(graph: Graph, samples: list[Sample], computed: list[Sample] = ()) -> None:
    """Reference outputs from an FP32 ONNX Runtime run of the original model, where none were given; those and
    the ``computed`` ones (the FP32 profile's run gives them) are checked."""
    todo = [s for s in samples if s.reference is None]
    if todo:
        sess = session(graph.runnable_copy())
        names = [o.name for o in graph.outputs]
        for s in todo:
            s.reference = dict(zip(names, run(sess, names, s.inputs, f"the model in FP32 on {s.source!r}")))
    done = {id(s) for s in todo}
    for s in [*todo, *(c for c in computed if id(c) not in done)]:
        for name, value in s.reference.items():
            if np.issubdtype(value.dtype, np.floating) and np.isnan(value).any():
                bad = _nonfinite_inputs(s)
                cause = (f" (input {bad[0]!r} holds NaN or inf values, which the model does not mask)"
                         if bad else "")
                raise UsageError(
                    f"the FP32 reference for output {name!r} contains NaN on {s.source!r}{cause}: "
                    "check the inputs, or pass --reference"
                )


def sample_shapes(samples: Iterable[Mapping[str, np.ndarray]]) -> dict[str, tuple]:
    """input -> (min, opt, max) over the samples' shapes (opt: the first sample's)."""
    seen: dict[str, list] = {}
    for inputs in samples:
        for name, array in inputs.items():
            seen.setdefault(name, []).append(tuple(np.shape(array)))
    return {
        name: (tuple(map(min, zip(*found))), found[0], tuple(map(max, zip(*found))))
        for name, found in seen.items()
        if len({len(s) for s in found}) == 1
    }
