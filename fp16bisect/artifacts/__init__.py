"""What a search leaves behind: the override JSON (override_json builds it, overrides reads it against
overrides.schema.json), its build arguments (exports), the mixed-precision ONNX writer (mixed), `fp16bisect
apply` (apply), the verification of a written model (verify), and whole-or-nothing file writes (files)."""
