"""Estimate latency, throughput and memory of an ONNX model on a target before any board is involved.

``graph`` turns the shape-inferred ONNX graph into layers (FLOPs, bytes, weights) and groups
them into the kernels an engine runs (TensorRT's fusions, or one kernel per layer for eager
PyTorch); ``rates`` reads the target's peak rates, bandwidth and power-mode clocks from its
profile; ``efficiency`` holds the per-layer-type efficiency factors as data (with how each was
obtained); ``model`` is the per-kernel roofline, the GPU/DLA split with its transitions and the
memory estimate; ``report`` renders it as a table, JSON and a plot.

Everything here is a model.  It is checked against kernel times measured on an H200 and against
published Jetson results (``benchmarks/estimator/``), and says so where it is on weak ground.
Torch-free; ``onnx`` is imported inside functions.
"""
