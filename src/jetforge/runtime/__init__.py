"""What ships to the device: preprocessing, sessions over backends, engine building, measurement.

Needs numpy and ``jetforge.targets`` only; TensorRT, CUDA bindings and ONNX Runtime are
imported lazily by the backends that use them, and torch never on the device path.
"""
