"""Writing files whole or not at all (atomic replace), and checking early that a path can be written."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from fp16bisect.errors import UsageError


def check_writable(path: str | Path) -> None:
    """Fail now, with a usable message, if ``path`` cannot be written later."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"-o {str(path)!r} is a directory: give a file name, e.g. {str(path / 'overrides.json')!r}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r} ({exc.strerror}): choose another -o path") from None


def write_json(path: str | Path, data: dict) -> None:
    """Atomic: a reader sees the old file or the whole new one, never half."""
    write_atomic(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8"))


def write_atomic(path: str | Path, data) -> None:
    """``data``: the bytes, or a function that writes them to the open file (a model streamed from its maps)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r} ({exc.strerror}): choose another -o path") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a report or override file is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
