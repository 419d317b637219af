"""The public TensorRT entry for users' build scripts (`from fp16bisect.tensorrt import apply_overrides, verify_pins`).

A re-export only: the code lives in `fp16bisect/backends/tensorrt/pins.py`.
"""
from .backends.tensorrt.pins import Applied, IgnoredPin, MissingNodesWarning, PinCheck, apply_overrides, verify_pins

__all__ = ["Applied", "IgnoredPin", "MissingNodesWarning", "PinCheck", "apply_overrides", "verify_pins"]
