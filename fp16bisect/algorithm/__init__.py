"""The search, pure: a short function over a predicate on sets of candidate ids, with its record (memo),
look-ahead and progress. Standard library only: no ONNX, NumPy, TensorRT or backend, so it can be
property-tested in milliseconds on synthetic oracles."""
