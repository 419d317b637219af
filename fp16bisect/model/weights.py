"""Where a model's weights live: in files, read where they are, passed through Python at most once.

A model is loaded as a skeleton: every weight of at least ``EXTERNAL_MIN`` bytes
refers to its bytes by an absolute path, an offset and a length. Inline weights
refer to their own place in the .onnx file (``wire.skeleton``: the file is
walked, not parsed); external ones keep their files. The skeleton (a few MB even
for a 3 GB UNet) is what every part of fp16bisect copies, edits and serialises:
the emulation, the FP32 profile, the mixed-precision writer.

Python reads a weight through ``array`` (a read-only memory map of its bytes,
unmapped with the array). ONNX Runtime reads the files itself: a session is
made from the serialised skeleton with ``session.model_external_initializers_
file_folder_path`` (``external_initializers``), so it maps the weights instead of
parsing and copying a serialised model. The FP16 copies of constants (the
writer's rule, ``fp16.constant_to_fp16``) are written once to a work directory
(``Store``) and shared by the emulation and every plan's file. A model file is
written only where one must exist: ``save`` writes a self-contained model,
inline under 2 GB, else with its weights in ``<name>.data`` beside it, streamed
tensor by tensor.
"""

from __future__ import annotations

import os
import tempfile
import threading
import weakref
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from fp16bisect.errors import UsageError
from fp16bisect.model import wire

EXTERNAL_MIN = 1024  # bytes: smaller tensors (shapes, scalars) stay inline, where shape inference reads them
PROTOBUF_LIMIT = 2**31 - 1
ALIGN = 64
EXTERNAL = TensorProto.EXTERNAL

_alive: list = []  # stores live to the end of the process (see Store)


def _directories() -> set[str]:
    """The work directories of the live stores."""
    return {str(store.directory) for store in _alive}


def return_freed_memory() -> None:
    """Let glibc hand large freed blocks back to the system (a fixed 1 MB mmap threshold): its default threshold
    grows with every large block freed, so freed weights, temporaries and session buffers would stay in the heap
    and count in the peak of every later stage (seen: 0.4 GB of bert-base's 0.44 GB kept after a full parse of
    its weights was freed). A no-op off glibc."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def is_external(tensor: TensorProto) -> bool:
    return tensor.data_location == EXTERNAL


def reference(tensor: TensorProto) -> tuple[str, int, int]:
    """(path, offset, length) of an external tensor's bytes."""
    info = {e.key: e.value for e in tensor.external_data}
    return info["location"], int(info.get("offset", 0) or 0), int(info.get("length", -1) or -1)


def _refer(tensor: TensorProto, path: str, offset: int, length: int) -> None:
    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    tensor.data_location = EXTERNAL
    for key, value in (("location", path), ("offset", str(offset)), ("length", str(length))):
        tensor.external_data.add(key=key, value=value)


def array(tensor: TensorProto) -> np.ndarray:
    """A tensor's value; for an external tensor a read-only map of its bytes in its file."""
    if not is_external(tensor):
        return onnx.numpy_helper.to_array(tensor)
    path, offset, _ = reference(tensor)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    count = int(np.prod(tensor.dims, dtype=np.int64))
    if count == 0:
        return np.zeros(tuple(tensor.dims), dtype)
    # a map of its own, unmapped with the array: pages read through it leave this process's RSS then
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,)).reshape(tuple(tensor.dims))


class Store:
    """The work directory weights are written to (a temporary one unless given), removed when the process
    exits or ``close`` is called: not when the store is dropped, since skeletons that refer to its files (a
    written plan's model, a session's) may outlive the graph that made it."""

    def __init__(self, workdir: str | Path | None = None):
        parent = None if workdir is None else Path(workdir)
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        self.directory = Path(tempfile.mkdtemp(prefix=".fp16bisect-weights-", dir=parent))
        self._cleanup = weakref.finalize(self, _remove, str(self.directory))
        _alive.append(self)
        self._files: dict[str, _Appender] = {}
        self._derived: dict[str, TensorProto] = {}
        # the command backend's threads write plans at once: one writer at a time, and each copy made once
        self._lock = threading.RLock()

    def file(self, name: str) -> "_Appender":
        with self._lock:
            if name not in self._files:
                self._files[name] = _Appender(self.directory / name)
            return self._files[name]

    def put(self, tensor: TensorProto, value: np.ndarray | None = None, file: str = "weights.bin") -> None:
        """Write ``value`` (default: the tensor's inline data) to the store and make ``tensor`` refer to it."""
        if value is not None and value.dtype.kind == "V":  # ml_dtypes (bfloat16) has no buffer format: its bytes
            value = np.ascontiguousarray(value).view(np.uint8)
        data = np.ascontiguousarray(value).reshape(-1).data.cast("B") if value is not None \
            else memoryview(_inline_bytes(tensor))  # written from its buffer: no copy
        with self._lock:
            path, offset = self.file(file).append(data)
        _refer(tensor, path, offset, len(data))

    def derived(self, key: str, name: str, compute) -> TensorProto:
        """A tensor named ``name`` holding ``compute()`` (an array), written once per ``key`` and shared by
        every later request: e.g. the FP16 copy of a weight, which the emulation and every plan's file use."""
        with self._lock:
            found = self._derived.get(key)
            if found is None:
                value = np.asarray(compute())
                found = TensorProto(name=key, data_type=helper.np_dtype_to_tensor_dtype(value.dtype),
                                    dims=value.shape)
                self.put(found, value, "derived.bin")
                self._derived[key] = found
        tensor = TensorProto()
        tensor.CopyFrom(found)
        tensor.name = name
        return tensor

    def close(self) -> None:
        self._cleanup()
        if self in _alive:
            _alive.remove(self)


def close_since(count: int) -> None:
    """Remove the work directories of the stores made after the first ``count`` (``len(weights._alive)`` when a
    command started: at its end, nothing it loaded is used any more)."""
    for store in list(_alive[count:]):
        store.close()


def alive() -> int:
    return len(_alive)


def _remove(directory: str) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)


class _Appender:
    """Tensors appended to a binary file, each at an offset aligned to ``ALIGN`` bytes: to ``file``, open and
    owned by the caller, or else to ``path``, opened for each tensor and closed after it (a store keeps no file
    open between writes, so none is left open when it is dropped or the process ends)."""

    def __init__(self, path: Path | str, file=None):
        self.path = str(path)
        self._file = file
        self._size = 0

    def append(self, data) -> tuple[str, int]:
        if self._file is not None:
            return self._write(self._file, data)
        with open(self.path, "ab") as f:
            return self._write(f, data)

    def _write(self, f, data) -> tuple[str, int]:
        pad = -self._size % ALIGN
        if pad:
            f.write(b"\0" * pad)
        offset = self._size + pad
        f.write(data)
        f.flush()
        self._size = offset + len(data)
        return self.path, offset


def _inline_bytes(tensor: TensorProto) -> bytes:
    if tensor.HasField("raw_data"):
        return tensor.raw_data
    return onnx.numpy_helper.to_array(tensor).tobytes()


def externalize(model: onnx.ModelProto, source_dir: Path | None, store: Store | None) -> None:
    """In place: external references of the main graph made absolute (relative to ``source_dir``) and checked;
    inline weights of at least ``EXTERNAL_MIN`` bytes moved to ``store`` (when one is given)."""
    for tensor in model.graph.initializer:
        if is_external(tensor):
            path, offset, length = reference(tensor)
            absolute = Path(path) if Path(path).is_absolute() else (source_dir or Path.cwd()) / path
            _check_reference(tensor, absolute, offset, length)
            _refer(tensor, str(absolute.resolve()), offset, length if length >= 0 else _nbytes(tensor))
        elif store is not None and tensor.data_type != TensorProto.STRING and _nbytes(tensor) >= EXTERNAL_MIN:
            store.put(tensor)


def _nbytes(tensor: TensorProto) -> int:
    if tensor.data_type == TensorProto.STRING:
        return 0
    itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


def _check_reference(tensor: TensorProto, path: Path, offset: int, length: int) -> None:
    if not path.is_file():
        raise UsageError(
            f"cannot read the external data of weight {tensor.name!r}: {str(path)!r} not found: keep the weight "
            "files beside the model"
        )
    need = offset + (length if length >= 0 else _nbytes(tensor))
    if path.stat().st_size < need:
        raise UsageError(
            f"cannot read the external data of weight {tensor.name!r}: {str(path)!r} holds {path.stat().st_size} "
            f"bytes, the model reads up to byte {need} (truncated?): copy the weight files again"
        )


def external_initializers(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str | None, tuple[list, list]]:
    """How ONNX Runtime gets a model's external weights: (the model to serialise, the folder it reads them from,
    (names, values) of those it cannot read there). ONNX Runtime maps the files it reads itself (it copies
    initializers handed over in the session options), but reads only locations inside one folder (no
    symbolic link out of it). So when the weights are in several folders (a model's file and a work directory's
    FP16 copies) the others are hard-linked into the work directory: the same files, no copy."""
    external = [t for t in model.graph.initializer if is_external(t)]
    if not external:
        return model, None, ([], [])
    size: dict[str, int] = {}
    for t in external:
        path, _, length = reference(t)
        size[os.path.dirname(path)] = size.get(os.path.dirname(path), 0) + length
    stores = [d for d in size if d in _directories()]
    folder = stores[0] if stores else max(size, key=size.__getitem__)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    import onnxruntime as ort

    names, values = [], []
    for t in copy.graph.initializer:
        if not is_external(t):
            continue
        path = reference(t)[0]
        name = os.path.basename(path) if os.path.dirname(path) == folder else _link(path, folder)
        if name is not None:
            for entry in t.external_data:
                if entry.key == "location":
                    entry.value = name
        else:
            names.append(t.name)
            values.append(ort.OrtValue.ortvalue_from_numpy(np.array(array(t))))  # np.array: 0-d stays 0-d
    return copy, folder, (names, values)


def in_work_directory(model: onnx.ModelProto, name: str) -> Path | None:
    """``model`` written as ``name`` in the work directory its weights are read from, referring to them there
    by relative paths (hard links where they are elsewhere): a file any ONNX reader takes (TensorRT's parser
    included) with no copy of a weight. None where that cannot be (no work directory among its folders, or a
    link that could not be made): the caller then writes a self-contained copy (``save``)."""
    copy, folder, (names, _) = external_initializers(model)
    if folder is None or folder not in _directories() or names:
        return None
    path = Path(folder) / name
    path.write_bytes(copy.SerializeToString())
    return path


def _link(path: str, folder: str) -> str | None:
    """The name of a hard link to ``path`` in work directory ``folder`` (made once), None where none can be
    made (another file system, or ``folder`` is not a work directory)."""
    if folder not in _directories():
        return None
    name = f"link-{abs(hash(path)):x}-{os.path.basename(path)}"
    target = os.path.join(folder, name)
    if not os.path.exists(target):
        try:
            os.link(path, target)
        except OSError:
            return None
    return name


def weight_bytes(model: onnx.ModelProto) -> int:
    """The bytes of the main graph's initializers, inline or external, counted without serialising."""
    return sum(len(t.raw_data) if t.HasField("raw_data") else _nbytes(t) for t in model.graph.initializer)


def too_big(model: onnx.ModelProto) -> bool:
    """Over what one protobuf message can hold (2 GB), external weights counted as if inline; no
    ``ByteSize()`` of the model (it walks every byte of every weight)."""
    nodes = sum(n.ByteSize() for n in model.graph.node)
    return weight_bytes(model) + nodes >= PROTOBUF_LIMIT


def checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy ``onnx.checker`` takes in memory: its external weights declared as graph inputs of their type and
    shape (the checker opens external files relative to the working directory), its inline ones as they are."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    g = copy.graph
    external = [t for t in g.initializer if is_external(t)]
    declared = {v.name for v in g.input}
    g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in external if t.name not in declared)
    keep = [t for t in g.initializer if not is_external(t)]
    del g.initializer[:]
    g.initializer.extend(keep)
    return copy


def inline(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy holding its weights (for readers that take a proto whole, under 2 GB)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for t in copy.graph.initializer:
        if is_external(t):
            raw = bytes(_raw(t))
            t.ClearField("data_location")
            del t.external_data[:]
            t.raw_data = raw
    return copy


def save(model: onnx.ModelProto, path: str | Path, write=None, external: bool = False) -> None:
    """Write ``model`` as a self-contained file, its weights streamed from where they are (no copy of them in
    memory; ``model`` is not changed): inline under 2 GB, else every weight of at least ``EXTERNAL_MIN`` bytes
    in ``<name>.data`` beside it. ``write(path, fill)`` makes a file whose content ``fill(f)`` writes (default:
    plainly; ``apply`` passes an atomic writer). ``external``: ``<name>.data`` whatever the size (a model
    that came with external data gets its mixed model the same way)."""
    path = Path(path)
    write = write or _write
    if not external and not too_big(model):
        write(path, lambda f: wire.write_inline(model, f, _raw, is_external))
        return
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # a skeleton: cheap
    data_name = f"{path.name}.data"

    def fill(out) -> None:
        data = _Appender(data_name, out)
        for t in copy.graph.initializer:
            if is_external(t):
                view = _raw(t)
            elif t.data_type != TensorProto.STRING and _nbytes(t) >= EXTERNAL_MIN:
                view = memoryview(_inline_bytes(t))
            else:
                continue
            _refer(t, *data.append(view), len(view))

    write(path.parent / data_name, fill)  # the weights first, then the model that points to them
    write(path, lambda f: f.write(copy.SerializeToString()))


def _raw(tensor: TensorProto) -> memoryview:
    """An external tensor's bytes as they are in its file (a map, not a copy)."""
    data = array(tensor)
    flat = np.ascontiguousarray(data).reshape(-1)
    if flat.dtype.kind == "V":  # ml_dtypes (bfloat16) has no buffer format: its bytes
        flat = flat.view(np.uint8)
    return flat.data.cast("B") if data.size else memoryview(b"")


def _write(path: Path, fill) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        fill(f)
