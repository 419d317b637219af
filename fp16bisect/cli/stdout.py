"""The command line's stdout, whose reader may leave early (``fp16bisect search ... | head -1``).

A reader closing the pipe is no failure of the run: a search has written its override JSON before it prints its
summary. So once a write finds the pipe closed, stdout goes to the null device (as the Python documentation's note on
SIGPIPE advises), everything printed after that goes nowhere, and the command ends with its own exit code, without
the exit 1 rich's console gives a broken pipe or the traceback Python prints when it flushes stdout at exit.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO, cast


class ReaderMayLeave:
    """A text stream that writes to ``stream`` until its reader has gone, and to the null device after."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...: the stream's
        return getattr(self.stream, name)

    def _gone(self) -> None:
        """The file descriptor now writes to the null device: what the stream still holds, and all that follows."""
        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):  # no descriptor (a test's capture): nothing to redirect
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


@contextlib.contextmanager
def reader_may_leave() -> Iterator[None]:
    """``sys.stdout`` as a ``ReaderMayLeave`` while the command runs; flushed (its reader may have gone) when
    it ends, so that Python's own flush at exit finds nothing left to write."""
    real = sys.stdout
    if real is None:
        yield
        return
    wrapped = ReaderMayLeave(real)
    sys.stdout = cast(TextIO, wrapped)
    try:
        yield
    finally:
        wrapped.flush()
        sys.stdout = real
