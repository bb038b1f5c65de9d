"""TensorRT INT8 arithmetic simulated in ONNX Runtime (`simulate`) and its worker pool (`pool`): how the INT8
accuracy is measured the way TensorRT computes it."""
