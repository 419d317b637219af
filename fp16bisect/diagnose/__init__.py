"""Diagnosis without a search: the deployment pre-flight gate `check` (preflight), the layer-wise comparison of FP16
with FP32 behind `compare` and the report (layerwise), and the engine's kernel plan of an answer behind `kernels`
(kernels: built by the tensorrt backend, read from the build log, compared)."""
