"""Backends turn a plan (candidate ids kept in FP32) into model outputs.

``emulate`` (FP16 emulated on ONNX Runtime CPU) works everywhere and is what
``auto`` picks today. ``tensorrt`` (real engine builds) is not implemented in
this version: asking for it is a usage error, never a silent fallback.
"""

from __future__ import annotations

from ..errors import UsageError
from ..graph import Graph

NAMES = ("auto", "emulate", "tensorrt")


def make_backend(name: str, graph: Graph, **options):
    if name not in NAMES:
        raise UsageError(f"unknown backend {name!r}: use one of {', '.join(NAMES)}")
    if name == "tensorrt":
        raise UsageError(
            "the tensorrt backend is not available in this version of fp16bisect: use --backend emulate "
            "(FP16 emulated on ONNX Runtime CPU)"
        )
    from .emulate import EmulateBackend

    return EmulateBackend(graph)
