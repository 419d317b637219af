"""Tasks for the worker pools in test_parallel.py, in a module that imports almost nothing: a spawned worker
imports it by name, and importing the test module there would load pytest, hypothesis, ONNX and NumPy."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def die_once(_state, arg):
    """Kills its own process the first time it meets ``marker`` (a file it creates), then answers."""
    marker, value = arg
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return value


def die_always(_state, arg):
    if arg == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return arg


def visible(_state, _arg):
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def square(_state, x):
    return x * x


def setup_fails(_shared, _device):
    from fp16bisect.errors import UsageError

    raise UsageError("no such input 'x': pass an npz with the model's inputs")
