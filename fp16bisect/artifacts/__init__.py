"""What a search leaves behind: the override JSON and its exports (overrides), the mixed-precision ONNX
writer (mixed), `fp16bisect apply` (apply) and the verification of a written model (verify)."""
