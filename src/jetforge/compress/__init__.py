"""Model compression on the workstation: pruning, distillation, QAT, and ONNX export (uses torch)."""
