"""What to do about a layer DLA does not run: advice per ONNX op and per kind of 3-D window.

The analysis shows one line per distinct fix (:attr:`~.analyze.DlaAnalysis.suggestions`); a rule's own
``suggestion`` is the fallback when neither table here has a better one.
"""

from typing import Dict

HARD_SWISH_FIX = ("write HardSwish as x * Clip(x + 3, 0, 6) * (1/6) (Add, Clip, Mul), which DLA runs "
                  "(Clip as kCLIP, Add/Mul as element-wise)")

# Time folding, per kind of 3-D window (``time_fold`` fact): what DLA can run instead.
TIME_FOLD_SUGGESTIONS: Dict[str, str] = {
    "spatial": ("a 1 x k x k window over (N, C, T, H, W) is exactly a 2-D k x k window over the N*T frames: fold "
                "time into the batch, (N, C, T, H, W) -> (N*T, C, H, W) (jetforge dla-check --fold-time OUT.onnx "
                "writes that exact rewrite); DLA then runs it, at the cost of the GPU<->DLA transitions around it"),
    "time-strided": ("a 1 x k x k window with time stride s is a 2-D window on every s-th frame: exact as a time "
                     "Slice (GPU) followed by the folded 2-D window; not rewritten by --fold-time"),
    "temporal": ("a k x 1 x 1 temporal window mixes frames: it has no per-frame 2-D form and stays on the GPU "
                 "(a (2+1)D design keeps these small)"),
    "spatiotemporal": ("a k x k x k window mixes frames and pixels: no exact 2-D form; factorise it as 1 x k x k "
                       "(DLA after folding time into the batch) + k x 1 x 1 (GPU), a (2+1)D block, and retrain"),
    "per-frame": ("per-element on a 5-D clip tensor: exact on the frames folded into the batch, so it runs on "
                  "DLA inside a folded region (jetforge dla-check --fold-time OUT.onnx)"),
}

# Per-ONNX-op advice for ops that fall back (shown once per op in the report's suggestions).
OP_SUGGESTIONS: Dict[str, str] = {
    "HardSwish": HARD_SWISH_FIX,
    "HardSigmoid": "write HardSigmoid as Clip(x + 3, 0, 6) * (1/6) (Add, Clip, Mul), which DLA runs",
    "Elu": "replace ELU with ReLU or LeakyReLU and fine-tune",
    "Gelu": "replace GELU with ReLU or SiLU (x * Sigmoid(x)) and fine-tune",
    "Mish": "replace Mish with SiLU (x * Sigmoid(x)), which DLA runs as Sigmoid + Mul",
    "Softplus": "replace Softplus with ReLU and fine-tune",
    "GlobalAveragePool": ("replace the global average pool with AveragePool(kernel = H x W) when H, W <= 8 "
                          "(PyTorch: nn.AvgPool2d(7) at 224 input), which DLA runs as pooling"),
    "ReduceMean": "a mean over H and W is AveragePool(kernel = H x W) when H, W <= 8",
    "Gather": "DLA has no Gather: index with a constant Slice, or keep it at the end of the network on the GPU",
    "Pad": "fold the padding into the next Conv's pads (DLA pads up to 31)",
    "Div": "divide by a constant as Mul by its reciprocal",
    "Pow": "square as Mul(x, x)",
    "Cast": "remove the Cast from the exported graph (keep the network in one float type)",
    "QuantizeLinear": "build from the plain ONNX plus the calibration cache for DLA INT8",
    "DequantizeLinear": "build from the plain ONNX plus the calibration cache for DLA INT8",
}
