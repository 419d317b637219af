"""The public TensorRT entry for users' build scripts (`from fp16bisect.tensorrt import apply_overrides, verify_pins`).

A re-export only: the code lives in `fp16bisect/backends/tensorrt/pin.py` (apply_overrides) and
`fp16bisect/backends/tensorrt/inspection.py` (verify_pins).
"""
from fp16bisect.backends.tensorrt.inspection import IgnoredPin, PinCheck, verify_pins
from fp16bisect.backends.tensorrt.pin import Applied, MissingNodesWarning, apply_overrides

__all__ = ["Applied", "IgnoredPin", "MissingNodesWarning", "PinCheck", "apply_overrides", "verify_pins"]
