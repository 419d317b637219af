"""Diagnosis without a search: the deployment pre-flight gate `check` (preflight) and the layer-wise
comparison of FP16 with FP32 behind `compare` and the report (layerwise)."""
