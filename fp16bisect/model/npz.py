"""``.npz`` files of named arrays: read (checked before numpy allocates), written, and recent ones kept.

A sample's arrays are read from their file each time they are used (``model/samples.py``), so that a search over
many samples holds only a few of them in memory. ``read`` keeps the files it read last, up to ``BUDGET`` bytes of
arrays (and always the last one per ``slot``: inputs, reference), and returns them again while the file is
unchanged: a plan judged on the most stressing sample first reads it once for the whole search, and a data set
of small samples is read from disk once. Large samples (a 10 MB image) still stream: a few are kept, never all.
"""

from __future__ import annotations

import math
import os
import threading
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np

from fp16bisect.errors import UsageError

BUDGET = 64 << 20  # bytes of arrays kept from recent reads, beyond the last file of each slot
_KEPT: OrderedDict = OrderedDict()  # (path, mtime_ns, size) -> (slot, bytes, arrays), least recently used first
_LOCK = threading.Lock()


def read(path: str | Path, slot: str = "") -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` at ``path``; a file that is not one is a ``UsageError`` that says how to write
    one. With ``slot``, the file is kept among the recent ones and returned again while it is unchanged."""
    if not slot:
        return _read(path)
    try:
        key = _key(path)
    except OSError:
        return _read(path)  # says it is missing
    with _LOCK:
        kept = _KEPT.get(key)
        if kept is not None:
            _KEPT.move_to_end(key)
            return dict(kept[2])
    arrays = _read(path)
    _keep(key, slot, arrays)
    return dict(arrays)


def _key(path: str | Path) -> tuple:
    st = os.stat(path)
    return (str(path), st.st_mtime_ns, st.st_size)


def _keep(key: tuple, slot: str, arrays: dict) -> None:
    """Keep ``arrays`` as the most recent file of ``slot``; drop the least recent ones beyond the budget, except
    the last file of each slot."""
    with _LOCK:
        _KEPT[key] = (slot, sum(a.nbytes for a in arrays.values()), arrays)
        _KEPT.move_to_end(key)
        last = {}
        for k, (kept_slot, _, _) in _KEPT.items():
            last[kept_slot] = k
        total = sum(size for _, size, _ in _KEPT.values())
        for k in list(_KEPT):
            if total <= BUDGET:
                break
            if k not in last.values():
                total -= _KEPT.pop(k)[1]


def forget() -> None:
    """Drop the kept files (a command ends; a test measures memory)."""
    with _LOCK:
        _KEPT.clear()


def write(path: str | Path, arrays: dict[str, np.ndarray], slot: str = "") -> None:
    """Write ``arrays`` to ``path`` (its folder made), through a temporary name: a reader never sees half a file.
    With ``slot``, they are kept as a recent file of that slot, as if just read (a reference written now is read
    back soon)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub matches **kwds against allow_pickle: bool
    os.replace(partial, path)
    if slot:
        _keep(_key(str(path)), slot, {k: np.array(v) for k, v in arrays.items()})  # copies: a view keeps its base


def _read(path: str | Path) -> dict[str, np.ndarray]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"file {str(path)!r} not found: pass an .npz made with numpy.savez(path, name=array, ...)")
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
            f"{str(path)!r} is not a readable .npz ({one_line(exc)}): write it with numpy.savez(path, name=array, ...)"
        ) from None


def _check_members(path: Path) -> None:
    """Read each array's header first: refuse object arrays and arrays that declare more data than the archive
    holds (a truncated or corrupt file), before numpy allocates them."""
    for name, shape, dtype, left in _headers(path):
        if dtype.hasobject:
            raise ValueError(f"array {name!r} holds Python objects; save numeric arrays")
        declared = math.prod(shape) * dtype.itemsize
        if declared > left:
            raise ValueError(
                f"array {name!r} declares shape {tuple(shape)} ({declared} bytes) but holds "
                f"{max(left, 0)}: the file is truncated or corrupt"
            )


def _headers(path: Path):
    """(name, shape, dtype, bytes after its header) of each array in the archive."""
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
                yield name, tuple(shape), dtype, info.file_size - f.tell()


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:300] + "...") if len(text) > 300 else (text or type(exc).__name__)
