"""fp16bisect: find the smallest set of ONNX nodes that must stay in FP32 for an FP16 build to be right."""

__version__ = "0.1.0"
