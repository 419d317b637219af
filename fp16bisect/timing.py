"""Stages that take time, said once, with their seconds, when they end."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def timed(say: Callable[[str], None], text: str) -> Iterator[None]:
    """``say("text (N s)")`` when the block ends (not when it raises: the error says why)."""
    start = time.perf_counter()
    yield
    say(f"{text} ({time.perf_counter() - start:.1f} s)")
