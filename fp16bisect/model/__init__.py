"""The model and its data: the ONNX graph and its candidates, the samples and their FP32 references,
the FP32 activation profile (the suspicion order), and ONNX Runtime sessions."""
