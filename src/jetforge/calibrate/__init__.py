"""INT8 calibration from real samples: statistics, algorithms, TensorRT caches, Q/DQ ONNX, accuracy.

May import numpy, onnx, onnxruntime, onnx-graphsurgeon, ``jetforge.runtime`` and
``jetforge.targets``; never torch.
"""
