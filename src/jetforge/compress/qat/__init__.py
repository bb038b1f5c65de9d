"""Quantization-aware training along TensorRT's INT8 rules, Q/DQ ONNX export and the QAT -> DLA cache path.

>>> from jetforge.compress.qat import prepare_qat, calibrate_qat, export_qdq_onnx   # doctest: +SKIP
>>> qmodel = prepare_qat(model)                       # fold BN, quantize Conv2d/3d/Linear inputs+weights, adds
>>> calibrate_qat(qmodel, calib_loader, "entropy")    # initial activation ranges (jetforge.calibrate.algorithms)
>>> ... train qmodel ...                              # or qat(QatConfig) for the whole recipe
>>> export_qdq_onnx(qmodel, "model.qdq.onnx")         # then jetforge.calibrate.qdq.translate for DLA
"""

from jetforge.compress.qat.train_quantized import ExportConfig, QatConfig, QatOptions, QatResult, qat
from jetforge.compress.qat.export import (QdqExport, export_qdq_onnx, normalize_qdq, onnx_accuracy, ort_kernels,
                                          qdq_for_ort)
from jetforge.compress.qat.modules import (FrozenBatchNorm, FrozenBatchNorm2d, QuantAdd, QuantConv2d, QuantConv3d,
                                           QuantLinear)
from jetforge.compress.qat.prepare import (QatSummary, calibrate_qat, fold_batchnorm, freeze_weight_ranges,
                                           prepare_qat, quantizers, set_quantization, unsupported_layers)
from jetforge.compress.qat.quantizer import TensorQuantizer, fake_quantize

__all__ = ["ExportConfig", "QatConfig", "QatOptions", "QatResult", "qat", "FrozenBatchNorm", "FrozenBatchNorm2d",
           "QatSummary", "QdqExport", "QuantAdd", "QuantConv2d", "QuantConv3d", "QuantLinear",
           "TensorQuantizer", "calibrate_qat", "export_qdq_onnx", "fake_quantize", "fold_batchnorm",
           "freeze_weight_ranges", "normalize_qdq", "onnx_accuracy", "ort_kernels", "prepare_qat", "qdq_for_ort",
           "quantizers", "set_quantization", "unsupported_layers"]
