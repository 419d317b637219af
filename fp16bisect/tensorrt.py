"""The public TensorRT entry for users' build scripts (`from fp16bisect.tensorrt import apply_overrides`).

A re-export only: the code lives in `fp16bisect/backends/tensorrt/pins.py`.
"""
from .backends.tensorrt.pins import Applied, MissingNodesWarning, apply_overrides

__all__ = ["Applied", "MissingNodesWarning", "apply_overrides"]
