"""FP16 emulated on ONNX Runtime CPU: ``rewrite`` (rounding sites selected by a mask input), ``backend``
(``EmulateBackend``, one session for every plan), ``selftest`` (the Cast round trips survive ONNX Runtime)."""

from fp16bisect.backends.emulate.backend import EmulateBackend

__all__ = ["EmulateBackend"]
