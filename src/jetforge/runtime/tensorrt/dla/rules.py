"""The DLA restriction set as data: every documented limit is one :class:`Rule` citing its source.

A rule applies to one TensorRT layer kind (``"convolution"``, ``"pooling"``, ... or ``"*"``
for every layer), reads one *fact* that :mod:`jetforge.runtime.tensorrt.dla.analyze` computes from
the ONNX node (``kernel``, ``stride``, ``scales`` ...) and compares it with ``limit`` using a
named ``check``.  A rule can be restricted to DLA generations (1 = Xavier, 2 = Orin), a
range of TensorRT versions and to precisions.  ``effect`` says what a violation means:
``"gpu"`` the layer falls back to the GPU, ``"warn"`` it still runs on DLA but something
needs attention (INT8 range equality), ``"info"`` a remark (INT8 auto-upgraded to FP16).
``uncertain`` marks a rule whose documentation is unverified, conflicting or inferred: the
report shows it so that a prediction built on it is read as a prediction.

Sources are the primary documents: NVIDIA's DLA layer-restrictions page, TensorRT's public header
(``NVIDIA/TensorRT:include/NvInfer.h``), the DLA-SW operator list, the ONNX parser's source, issues.
"""

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from jetforge.runtime.tensorrt.version import TensorRTVersion

# --- source citations ---------------------------------------------------------------------------
_DLA_DOCS = "docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/dla-layer-restrictions.html"
SRC_GLOBAL = _DLA_DOCS + " (global restrictions)"
SRC_HEADER = "NVIDIA/TensorRT include/NvInfer.h @release/8.6 and @release/10.3"
SRC_HEADER86 = "NVIDIA/TensorRT include/NvInfer.h @release/8.6 (absent @release/10.3)"
SRC_DG84 = "TensorRT 8.4 developer guide, DLA chapter (§12; HeKun-NVIDIA translation)"
SRC_LATEST = _DLA_DOCS + " (summary table)"
SRC_DLASW = "NVIDIA/Deep-Learning-Accelerator-SW operators/README.md (Orin, TRT 8.6/JP6)"
SRC_INT8 = "NVIDIA/TensorRT include/NvInfer.h: INT8 dynamic-range equality constraints (developer guide for concat)"
SRC_QDQ = ("NVIDIA/TensorRT#2222 (no Q/DQ on DLA in 8.x); NVIDIA/Model-Optimizer#1661 (DLA still implicit-only "
           "in 10.x)")
SRC_SHUFFLE = ("NVIDIA/Deep-Learning-Accelerator-SW operators/README.md lists Reshape/Transpose as native "
               "('see Shuffle layer'); the 8.6/10.x Shuffle restriction text was not found (unverified)")
SRC_2D_ONLY = (_DLA_DOCS + " (summary table: '2D only' for Activation, ElementWise, Scale, Pooling, Convolution); "
               "TensorRT 8.x developer guide, DLA supported layers: 'Only two spatial dimension operations are "
               "supported' per layer")
SRC_ONNX_GAP = ("onnx/onnx-tensorrt builtin_op_importers.cpp, GlobalAveragePool importer: 'implemented via "
                "Reduce layers rather than Pooling layers' (ReduceOperation::kAVG)")

GPU = "gpu"
WARN = "warn"
INFO = "info"
CHECKS = ("range", "max", "in", "not_in", "eq", "true", "false", "deconv_kernel", "outside")


@dataclass(frozen=True)
class Rule:
    """One documented DLA restriction."""

    id: str
    kind: str                 # TensorRT layer kind the rule applies to, "*" for all
    fact: str                 # name of the fact analyze computes for the layer
    check: str                # one of CHECKS
    limit: Any                # bounds / allowed set / expected value, per ``check``
    condition: str            # the restriction in words, as documented
    message: str              # why the layer cannot run there ("{value}" is substituted)
    suggestion: str           # how to make it DLA-capable
    source: str
    dla_versions: Tuple[int, ...] = ()        # empty: every generation (1 = Xavier, 2 = Orin)
    trt_min: Optional[str] = None             # applies from this TensorRT version (inclusive)
    trt_below: Optional[str] = None           # ... up to this one (exclusive)
    precisions: Tuple[str, ...] = ()          # empty: every precision
    effect: str = GPU
    uncertain: bool = False

    def applies(self, dla_generation: int, trt_version: Tuple[int, ...], precision: str) -> bool:
        if self.dla_versions and dla_generation not in self.dla_versions:
            return False
        if self.trt_min is not None and trt_version < TensorRTVersion.lenient(self.trt_min):
            return False
        if self.trt_below is not None and trt_version >= TensorRTVersion.lenient(self.trt_below):
            return False
        if self.precisions and precision not in self.precisions:
            return False
        return True

    def passes(self, value: Any) -> bool:
        """Whether ``value`` satisfies the rule (callers skip rules whose fact is None)."""
        return _CHECKERS[self.check](value, self.limit)

    def explain(self, value: Any) -> str:
        return self.message.replace("{value}", _show(value))

    def to_dict(self) -> Dict[str, Any]:
        limit = self.limit
        if isinstance(limit, (set, frozenset)):
            limit = sorted(limit)
        return {"id": self.id, "kind": self.kind, "fact": self.fact, "check": self.check, "limit": limit,
                "condition": self.condition, "message": self.message, "suggestion": self.suggestion,
                "source": self.source, "dla_versions": list(self.dla_versions), "trt_min": self.trt_min,
                "trt_below": self.trt_below, "precisions": list(self.precisions), "effect": self.effect,
                "uncertain": self.uncertain}


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "x".join(_show(v) for v in value) if all(isinstance(v, (int, float)) for v in value) \
            else "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _each(value: Any) -> List[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _range(value: Any, limit: Any) -> bool:
    lo, hi = limit
    return all(v is not None and lo <= v <= hi for v in _each(value))


def _outside(value: Any, limit: Any) -> bool:
    lo, hi = limit
    return all(v is None or not (lo <= v <= hi) for v in _each(value))


def _deconv_kernel(value: Any, limit: Any) -> bool:
    """Each of H, W in [lo, hi]; or one of them in the long set and the other 1 (not both long)."""
    lo, hi = limit["range"]
    long_set = set(limit["long"])
    dims = _each(value)
    if all(lo <= v <= hi for v in dims):
        return True
    if len(dims) == 2:
        a, b = dims
        return (a in long_set and b == 1) or (b in long_set and a == 1)
    return False


_CHECKERS = {
    "range": _range,
    "max": lambda value, limit: all(v <= limit for v in _each(value)),
    "in": lambda value, limit: all(v in limit for v in _each(value)),
    "not_in": lambda value, limit: all(v not in limit for v in _each(value)),
    "eq": lambda value, limit: all(v == limit for v in _each(value)),
    "true": lambda value, limit: bool(value),
    "false": lambda value, limit: not value,
    "deconv_kernel": _deconv_kernel,
    "outside": _outside,
}

# --- the layer kinds DLA runs at all --------------------------------------------------------------
DLA_LAYER_KINDS = frozenset([
    "convolution", "deconvolution", "pooling", "activation", "prelu", "elementwise", "scale", "lrn",
    "concatenation", "resize", "unary", "softmax", "slice", "shuffle", "matmul", "comparison", "reduce",
])

# Kinds whose DLA restriction text was not found for TensorRT 8.6/10.x: a DLA verdict on them is uncertain.
UNCERTAIN_KINDS = frozenset(["shuffle", "reduce", "comparison"])

FOLD_TIME_FIX = ("fold time into the batch, (N, C, T, H, W) -> (N*T, C, H, W), together with the 1 x k x k "
                 "convolution it follows (jetforge dla-check --fold-time OUT.onnx)")

RULES: List[Rule] = [
    # ---------------- every layer ----------------
    Rule("global.kind", "*", "kind", "in", DLA_LAYER_KINDS,
         "the layer kind is one DLA implements (conv, deconv, pooling, activation, PReLU, element-wise, scale, "
         "LRN, concat, resize, unary, softmax, slice, shuffle, matmul, comparison)",
         "{value} layers have no DLA implementation",
         "keep the op on the GPU, or rewrite it with DLA-capable ops (DLA-SW gives reconstruction recipes)",
         SRC_DLASW),
    Rule("global.static_shape", "*", "dynamic", "false", None,
         "DLA does not support dynamic dimensions: the profile's min, opt and max must be equal",
         "the layer's shape is dynamic",
         "build with a static shape (--shape NAME=1x3x224x224) or a profile with min = opt = max",
         SRC_GLOBAL),
    Rule("global.batch", "*", "batch", "max", 4096,
         "the maximum supported batch size is 4096 (batch = product of all dims except CHW)",
         "batch {value} exceeds the DLA maximum of 4096",
         "use a batch of at most 4096", SRC_GLOBAL),
    Rule("global.dims", "*", "max_chw", "max", 8192,
         "the maximum supported size for non-batch dimensions is 8192",
         "a non-batch dimension of {value} exceeds 8192",
         "tile or reshape the tensor so that C, H and W are at most 8192", SRC_GLOBAL),
    Rule("global.qdq", "*", "onnx_op", "not_in", frozenset(["QuantizeLinear", "DequantizeLinear"]),
         "DLA does not accept explicit quantization (Q/DQ) networks through TensorRT 10.x",
         "{value} nodes (explicit Q/DQ) are not accepted on DLA",
         "build the plain ONNX with the calibration cache (model.calib) for DLA INT8",
         SRC_QDQ, trt_below="11"),

    # ---------------- convolution / fully connected ----------------
    Rule("conv.spatial_2d", "convolution", "spatial_rank", "eq", 2,
         "convolution is supported in 2D only", "{value}-D convolution is not supported on DLA",
         "use a 2-D convolution", SRC_HEADER),
    Rule("conv.kernel", "convolution", "kernel", "range", (1, 32),
         "kernel H,W in [1, 32]", "kernel {value} is outside [1, 32]",
         "split a large kernel into stacked smaller convolutions", SRC_HEADER),
    Rule("conv.stride", "convolution", "stride", "range", (1, 8),
         "stride H,W in [1, 8]", "stride {value} is outside [1, 8]",
         "use a stride of at most 8 (follow with pooling for more downsampling)", SRC_HEADER),
    Rule("conv.padding", "convolution", "padding", "range", (0, 31),
         "padding H,W in [0, 31]", "padding {value} is outside [0, 31]",
         "use padding of at most 31 (pad explicitly on the GPU if more is needed)", SRC_HEADER),
    Rule("conv.padding_lt_kernel", "convolution", "padding_lt_kernel", "true", None,
         "the padding size must be less than the kernel size", "padding is not smaller than the kernel",
         "reduce the padding below the kernel size", SRC_HEADER),
    Rule("conv.dilation", "convolution", "dilation", "range", (1, 32),
         "dilation H,W in [1, 32]", "dilation {value} is outside [1, 32]",
         "use a dilation of at most 32", SRC_HEADER),
    Rule("conv.output_maps", "convolution", "out_channels", "range", (1, 8192),
         "output maps in [1, 8192]", "{value} output maps exceed 8192",
         "split the convolution into groups of at most 8192 output channels", SRC_HEADER),
    Rule("conv.groups", "convolution", "groups", "range", (1, 8192),
         "the maximum number of groups is 8192", "{value} groups exceed 8192",
         "use at most 8192 groups", SRC_HEADER),
    Rule("conv.int8_group_multiple4", "convolution", "int8_group_channels_ok", "true", None,
         "grouped INT8 convolution: the group size must be a multiple of 4 for input and output",
         "grouped INT8 convolution with a group size that is not a multiple of 4",
         "use channel counts per group that are multiples of 4, or run this layer in FP16",
         SRC_HEADER, precisions=("int8",), effect=WARN, uncertain=True),
    Rule("conv.cbuf", "convolution", "cbuf_banks", "max", 16,
         "CBUF: wtBanksForOneKernel + minDataBanks <= 16 (heuristic since TRT 8.6)",
         "needs {value} convolution-buffer banks, more than the 16 DLA has",
         "reduce input channels x kernel size, or the input width", SRC_DG84, uncertain=True),
    Rule("matmul.constant_weights", "matmul", "weights_constant", "true", None,
         "MatMul/Gemm runs on DLA only when the second input is a constant",
         "the second MatMul/Gemm input is not a build-time constant",
         "make the weights an initializer (constant) input", SRC_DLASW),
    Rule("matmul.output_maps", "matmul", "out_channels", "range", (1, 8192),
         "fully connected output maps in [1, 8192]", "{value} outputs exceed 8192",
         "split the layer into parts of at most 8192 outputs", SRC_HEADER),

    # ---------------- deconvolution ----------------
    Rule("deconv.spatial_2d", "deconvolution", "spatial_rank", "eq", 2,
         "deconvolution is supported in 2D only", "{value}-D deconvolution is not supported on DLA",
         "use a 2-D transposed convolution", SRC_HEADER),
    Rule("deconv.kernel", "deconvolution", "kernel", "deconv_kernel", {"range": (1, 32), "long": (64, 96, 128)},
         "kernel H,W in [1, 32], or one of 64/96/128 with 1 in the other dimension (1x64, 64x1; not 64x64)",
         "deconvolution kernel {value} is not supported",
         "use a kernel in [1, 32] (or 64/96/128 x 1)", SRC_HEADER),
    Rule("deconv.stride", "deconvolution", "stride", "deconv_kernel", {"range": (1, 32), "long": (64, 96, 128)},
         "stride: the same rule as the kernel", "deconvolution stride {value} is not supported",
         "use a stride in [1, 32] (or 64/96/128 x 1)", SRC_HEADER),
    Rule("deconv.square_23_32", "deconvolution", "square_kernel_or_stride", "outside", (23, 32),
         "square deconvolution kernels and strides in [23, 32] are disabled on DLA (slow compilation)",
         "square deconvolution kernel/stride {value} is disabled on DLA",
         "use a kernel/stride of at most 22, or a non-square one", SRC_DG84, uncertain=True),
    Rule("deconv.padding", "deconvolution", "padding", "eq", 0,
         "padding must be 0", "deconvolution padding {value} is not 0",
         "export the transposed convolution without padding and crop with a Slice", SRC_HEADER),
    Rule("deconv.groups", "deconvolution", "groups", "eq", 1,
         "nbGroups must be 1", "grouped deconvolution ({value} groups) is not supported",
         "use an ungrouped transposed convolution", SRC_HEADER),
    Rule("deconv.dilation", "deconvolution", "dilation", "eq", 1,
         "dilation must be 1", "dilated deconvolution ({value}) is not supported",
         "use dilation 1", SRC_DG84),
    Rule("deconv.channels", "deconvolution", "channels", "range", (1, 8192),
         "input and output channels in [1, 8192]", "{value} channels exceed 8192",
         "use at most 8192 channels", SRC_DG84),

    # ---------------- pooling ----------------
    Rule("pool.spatial_2d", "pooling", "spatial_rank", "eq", 2,
         "pooling is supported in 2D only", "{value}-D pooling is not supported on DLA",
         "use 2-D pooling", SRC_HEADER),
    Rule("pool.window", "pooling", "kernel", "range", (1, 8),
         "window H,W in [1, 8]", "pooling window {value} is outside [1, 8]",
         "pool in stages with windows of at most 8", SRC_HEADER),
    Rule("pool.stride", "pooling", "stride", "range", (1, 16),
         "stride H,W in [1, 16]", "pooling stride {value} is outside [1, 16]",
         "use a stride of at most 16", SRC_HEADER),
    Rule("pool.padding", "pooling", "padding", "range", (0, 7),
         "padding H,W in [0, 7]", "pooling padding {value} is outside [0, 7]",
         "use padding of at most 7", SRC_HEADER),
    Rule("pool.xavier_inclusive_padding", "pooling", "exclusive_padding", "false", None,
         "Xavier DLA supports only inclusive padding for average pooling (AverageCountExcludesPadding false)",
         "average pooling with padding that is excluded from the count (ONNX count_include_pad=0)",
         "export with count_include_pad=1 (PyTorch: count_include_pad=True) or without padding",
         SRC_HEADER86, dla_versions=(1,)),
    Rule("pool.int8_equal_ranges", "pooling", "int8_ranges_equal", "true", None,
         "INT8 pooling on DLA: input and output dynamic ranges must be equal",
         "input and output INT8 ranges differ",
         "give the pooling output the input's scale in the calibration cache", SRC_INT8,
         precisions=("int8",), effect=WARN),

    # ---------------- activations ----------------
    Rule("act.type", "activation", "onnx_op", "in",
         frozenset(["Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu"]),
         "valid activation types: kRELU, kSIGMOID, kTANH, kCLIP (header); Leaky ReLU (DG8.4, latest, DLA-SW)",
         "activation {value} is not supported on DLA",
         "replace it: HardSwish -> x*Clip(x+3,0,6)/6, HardSigmoid -> Clip(x+3,0,6)/6, SiLU -> x*Sigmoid(x), "
         "ReLU6 -> Clip(0,6)", SRC_HEADER),
    Rule("act.spatial_2d", "activation", "spatial_rank", "max", 2,
         "2D only: at most two spatial axes (tensors of rank <= 4, NCHW)",
         "activation over {value} spatial axes (a 5-D clip tensor) is not supported on DLA",
         FOLD_TIME_FIX, SRC_2D_ONLY),
    Rule("act.leaky_relu", "activation", "is_leaky_relu", "false", None,
         "Leaky ReLU: listed by DG8.4, the latest table and DLA-SW, absent from the header's list",
         "Leaky ReLU is documented inconsistently", "verify with can_run_on_DLA on the board",
         SRC_LATEST, effect=INFO, uncertain=True),
    Rule("act.clip_max", "activation", "clip_max", "range", (1, 127),
         "clipped ReLU: only values in [1, 127]", "Clip maximum {value} is outside [1, 127]",
         "use a clip ceiling in [1, 127] (ReLU6 = Clip(0, 6) is fine)", SRC_DG84),
    Rule("act.clip_min", "activation", "clip_min", "eq", 0.0,
         "clipped ReLU lower bound is 0 (kCLIP on DLA is a clipped ReLU)",
         "Clip minimum {value} is not 0", "use Clip(0, max), or a Max/Min element-wise pair",
         SRC_DG84, uncertain=True),
    Rule("act.int8_to_fp16", "activation", "int8_upgraded", "false", None,
         "TanH/Sigmoid in INT8 are supported by auto-upgrading to FP16",
         "runs in FP16 although INT8 was requested", "nothing to do (this is automatic)",
         SRC_DG84, precisions=("int8",), effect=INFO),
    Rule("prelu.spatial_2d", "prelu", "spatial_rank", "max", 2,
         "2D only: at most two spatial axes (tensors of rank <= 4, NCHW)",
         "PReLU over {value} spatial axes is not supported on DLA", FOLD_TIME_FIX, SRC_2D_ONLY),
    Rule("prelu.constant_slope", "prelu", "slope_constant", "true", None,
         "PReLU slopes must be a build-time constant", "the PReLU slope is not a constant",
         "make the slope an initializer", SRC_HEADER),

    # ---------------- element-wise ----------------
    Rule("eltwise.op", "elementwise", "onnx_op", "in", frozenset(["Add", "Sum", "Mul", "Sub", "Max", "Min"]),
         "DLA supports only kSUM, kPROD, kMAX, kMIN and kSUB (header 8.6 and 10.3)",
         "element-wise {value} is not supported on DLA through JetPack's TensorRT",
         "Div by a constant -> Mul by its reciprocal; Pow(x, 2) -> Mul(x, x)", SRC_HEADER),
    Rule("eltwise.spatial_2d", "elementwise", "spatial_rank", "max", 2,
         "2D only: at most two spatial axes (tensors of rank <= 4, NCHW)",
         "element-wise layer over {value} spatial axes (a 5-D clip tensor) is not supported on DLA",
         FOLD_TIME_FIX, SRC_2D_ONLY),
    Rule("eltwise.div_pow_uncertain", "elementwise", "onnx_op", "not_in", frozenset(["Div", "Pow"]),
         "the latest summary adds Div and Pow; DLA-SW: Div native only as of DRIVE TRT 8.6.12",
         "{value} on DLA is documented only for DRIVE OS / newer TensorRT (predicted GPU here)",
         "probe with can_run_on_DLA on the board, or rewrite with Mul", SRC_LATEST, effect=INFO, uncertain=True),
    Rule("eltwise.int8_equal_ranges", "elementwise", "int8_ranges_equal", "true", None,
         "INT8 element-wise on DLA: the dynamic ranges of both inputs shall be equal (the calibrator's largest "
         "value is used)", "the two inputs' INT8 ranges differ",
         "set both inputs to the larger range in the cache (TensorRT does this for calibrator-made ranges)",
         SRC_INT8, precisions=("int8",), effect=WARN),
    Rule("eltwise.xavier_sub", "elementwise", "xavier_sub", "false", None,
         "Xavier: Sub is implemented as a DLA Scale layer plus a Sum element-wise layer",
         "Sub runs as Scale + Sum on Xavier", "nothing to do", SRC_DG84, dla_versions=(1,), effect=INFO),

    # ---------------- scale (BatchNormalization not folded into a convolution) ----------------
    Rule("scale.spatial_2d", "scale", "spatial_rank", "max", 2,
         "2D only: at most two spatial axes (tensors of rank <= 4, NCHW)",
         "scale (BatchNorm) over {value} spatial axes is not supported on DLA", FOLD_TIME_FIX, SRC_2D_ONLY),

    # ---------------- LRN ----------------
    Rule("lrn.window", "lrn", "lrn_size", "in", frozenset([3, 5, 7, 9]),
         "LRN window in {3, 5, 7, 9}", "LRN size {value} is not one of 3, 5, 7, 9",
         "use an LRN size of 3, 5, 7 or 9", SRC_HEADER),
    Rule("lrn.int8_to_fp16", "lrn", "int8_upgraded", "false", None,
         "LRN in INT8 is supported by auto-upgrading to FP16", "runs in FP16 although INT8 was requested",
         "nothing to do", SRC_LATEST, precisions=("int8",), effect=INFO),

    # ---------------- concatenation ----------------
    Rule("concat.channel_axis", "concatenation", "concat_channel_axis", "true", None,
         "the concatenation axis must be the third to last (channel) axis",
         "concatenation along a non-channel axis", "concatenate along channels (axis 1 of NCHW)", SRC_HEADER),
    Rule("concat.min_inputs", "concatenation", "num_inputs", "range", (2, 1 << 30),
         "at least 2 inputs", "concatenation of {value} input(s)", "remove the single-input Concat",
         SRC_HEADER),
    Rule("concat.same_spatial", "concatenation", "same_spatial", "true", None,
         "all inputs must have the same spatial dimensions", "inputs differ in spatial size",
         "resize the inputs to a common H x W", SRC_HEADER),
    Rule("concat.int8_equal_ranges", "concatenation", "int8_ranges_equal", "true", None,
         "INT8 concatenation on DLA: all input ranges equal and the output range equal to each input",
         "input/output INT8 ranges differ", "give all concat inputs and its output one scale in the cache",
         SRC_INT8, precisions=("int8",), effect=WARN),

    # ---------------- resize ----------------
    Rule("resize.uses_scales", "resize", "uses_scales", "true", None,
         "setOutputDimensions() is not supported on DLA; scales must be used",
         "the resize is given output sizes, not scales",
         "export with scale_factor= instead of size= (PyTorch interpolate/Upsample)", SRC_HEADER),
    Rule("resize.mode", "resize", "resize_mode", "in", frozenset(["nearest", "linear"]),
         "resize modes kNEAREST and kLINEAR", "resize mode {value} is not supported",
         "use nearest or (bi)linear resize", SRC_HEADER),
    Rule("resize.rank4", "resize", "num_scales", "eq", 4,
         "nbScales must be exactly 4", "{value} scales (not 4)", "resize a 4-D NCHW tensor", SRC_HEADER),
    Rule("resize.nc_scales_one", "resize", "nc_scales", "eq", 1.0,
         "scales[0:2] (N, C) must be exactly 1", "N/C scales {value} are not 1", "resize H and W only",
         SRC_HEADER),
    Rule("resize.integer_scales", "resize", "hw_scales_integer", "true", None,
         "H,W scales must be integers", "H/W scales are not integers",
         "use an integer scale factor", SRC_HEADER),
    Rule("resize.nearest_scale", "resize", "nearest_scales", "range", (1, 32),
         "kNEAREST: H,W scales integers in [1, 32]", "nearest scale {value} is outside [1, 32]",
         "upsample in stages of at most 32x", SRC_HEADER),
    Rule("resize.linear_scale", "resize", "linear_scales", "range", (1, 4),
         "kLINEAR: H,W scales integers in [1, 4]", "linear scale {value} is outside [1, 4]",
         "upsample in stages of at most 4x", SRC_HEADER),
    Rule("resize.combo", "resize", "resize_combo_ok", "true", None,
         "kNEAREST: (asymmetric, floor), (half_pixel, round_prefer_floor), (half_pixel, round_prefer_ceil); "
         "kLINEAR: half_pixel (formula or upper selector)",
         "coordinate transformation / rounding combination is not supported",
         "export nearest with asymmetric+floor (PyTorch's default) or linear with align_corners=False",
         SRC_HEADER),

    # ---------------- unary ----------------
    Rule("unary.abs_only", "unary", "onnx_op", "in", frozenset(["Abs"]),
         "only UnaryOperation::kABS is supported", "unary {value} is not supported on DLA",
         "keep it on the GPU (Sin/Cos/Atanh are DLA-native only on DRIVE TRT 8.6.12+)", SRC_HEADER),

    # ---------------- softmax ----------------
    Rule("softmax.xavier", "softmax", "is_softmax", "false", None,
         "on Xavier, softmax is not supported on DLA (header 8.6)", "softmax is not supported on Xavier's DLA",
         "run the softmax on the GPU (or leave it out of the engine)", SRC_HEADER86,
         dla_versions=(1,), trt_below="10"),
    Rule("softmax.axis", "softmax", "softmax_axis_ok", "true", None,
         "the axis must be a channel or spatial dimension", "softmax over the batch axis",
         "apply softmax over C, H or W", SRC_HEADER),
    Rule("softmax.size", "softmax", "softmax_size_ok", "true", None,
         "axis dim <= 8192 when all other non-batch dims are 1, else axis dim <= 1024",
         "the softmax axis is too long for DLA", "reduce the axis length", SRC_HEADER),

    # ---------------- slice ----------------
    Rule("slice.constant", "slice", "slice_constant", "true", None,
         "start, size and stride must be build-time constants", "slice parameters are not constants",
         "make the slice parameters constants", SRC_HEADER),
    Rule("slice.stride1", "slice", "slice_steps", "eq", 1,
         "strides must be 1 in all dimensions", "slice step {value} is not 1", "use step 1", SRC_HEADER),
    Rule("slice.not_batch", "slice", "slices_batch", "false", None,
         "no slicing on the first dimension", "slices the batch dimension",
         "slice only C, H or W", SRC_HEADER),
    Rule("slice.rank4", "slice", "rank", "eq", 4,
         "the input must be 4-D", "slice input has rank {value}", "slice a 4-D tensor", SRC_HEADER),

    # ---------------- shuffle (Reshape / Flatten / Transpose / Squeeze / Unsqueeze) ----------------
    Rule("shuffle.rank4", "shuffle", "rank", "eq", 4,
         "shuffle input must be 4-D (restriction text not retrieved for 8.6/10.x)",
         "shuffle input has rank {value}", "keep reshapes between 4-D tensors",
         SRC_SHUFFLE, uncertain=True),
    Rule("shuffle.batch", "shuffle", "reshapes_batch", "false", None,
         "no reshape across the batch dimension (restriction text not retrieved)",
         "the reshape moves data across the batch dimension", "keep the batch dimension unchanged",
         SRC_SHUFFLE, uncertain=True),

    # ---------------- reduce ----------------
    Rule("reduce.global_avg", "reduce", "onnx_op", "not_in", frozenset(["GlobalAveragePool", "ReduceMean",
                                                                         "ReduceMin", "ReduceSum", "ReduceProd"]),
         "GlobalAveragePool/ReduceMean/ReduceMin are 'not exposed by TRT' on DLA (DLA-SW); the ONNX parser "
         "maps GlobalAveragePool to a Reduce layer, not Pooling",
         "{value} becomes a TensorRT Reduce layer, which DLA does not run",
         "replace a global average pool with AveragePool(kernel = H x W) when H, W <= 8 (e.g. 7x7 at 224 input); "
         "for a bigger map pool in stages", SRC_DLASW + "; " + SRC_ONNX_GAP, uncertain=True),
    Rule("reduce.max_drive_only", "reduce", "onnx_op", "not_in", frozenset(["GlobalMaxPool", "ReduceMax"]),
         "GlobalMaxPool is native only as of DRIVE TRT 8.6.12 (see Reduce layer)",
         "{value} on DLA is documented for DRIVE OS TensorRT only",
         "use MaxPool with a window <= 8", SRC_DLASW, uncertain=True),

    # ---------------- comparison ----------------
    Rule("comparison.equal_only", "comparison", "onnx_op", "in", frozenset(["Equal"]),
         "Equal is native in TRT 8.5; Greater/Less only as of DRIVE TRT 8.6.12", "{value} is not supported on DLA",
         "keep it on the GPU", SRC_DLASW, uncertain=True),
    Rule("comparison.int8", "comparison", "precision_int8", "true", None,
         "comparison runs in INT8 only; the output must be cast to FP16/INT8 immediately",
         "comparison needs INT8 precision", "build with --precision int8 (or best)", SRC_LATEST),
]

RULES_BY_ID: Dict[str, Rule] = {r.id: r for r in RULES}
if len(RULES_BY_ID) != len(RULES):  # pragma: no cover - a programming error caught at import
    raise RuntimeError("duplicate DLA rule id")
for _r in RULES:
    if _r.check not in _CHECKERS:  # pragma: no cover
        raise RuntimeError("rule %s has unknown check %s" % (_r.id, _r.check))


def rules_for(kind: str, dla_generation: int, trt_version: Sequence[int], precision: str,
              rules: Optional[Iterable[Rule]] = None) -> List[Rule]:
    """The rules that apply to a layer of ``kind`` on this DLA generation, TensorRT version and precision."""
    trt = tuple(trt_version)
    return [r for r in (RULES if rules is None else rules)
            if (r.kind == kind or r.kind == "*") and r.applies(dla_generation, trt, precision)]


def dla_generation(dla_version: Any) -> int:
    """``"1.0"``/``"v1"``/1 -> 1 (Xavier), ``"2.0"`` -> 2 (Orin)."""
    text = str(dla_version or "").lower().lstrip("v")
    digits = ""
    for ch in text:
        if ch.isdigit():
            digits += ch
        else:
            break
    return int(digits) if digits else 0
