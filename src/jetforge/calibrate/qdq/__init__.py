"""Explicit-quantization ONNX (Q/DQ): writing it from calibration scales (`export`), the graph surgery it needs
(`surgery`), and reading scales back out of a Q/DQ model for TensorRT caches and simulation (`translate`)."""
