"""The host layouts ``benchmarks/gpu_pipeline/pipeline_gpu.py`` can run a point with (``--variants``), and how a
variant's name resolves: ``auto`` is what `jetforge app --decode gpu` does for N streams; a ``-untimed`` suffix is the
same layout without the app's per-frame stage timing, a ``-hostdecode`` suffix the detector's boxes decoded on the host.
Split out of the script (one job: the catalogue of layouts, each with why it is there)."""

from typing import Any, Dict, Tuple

def _feed_pairs(**changed: Any) -> Dict[str, Any]:
    """``feed-pairs`` (one feeder thread, owned copies in rings, two frames of a stream a batch) with ``changed``: the
    A/B variants below differ from it in one setting each."""
    return dict({"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "feed"}, **changed)


# How the pipeline's host side runs (results/nvidia-h200_2026-12-01_host-variants{1,2,3}, _decode-layouts).
# nonblocking: frame copies and launches on non-blocking CUDA streams ordered by events; switch_ms: Python's GIL
# switch interval; per_stream: frames of one stream a batch may take; keep: how a decoded frame becomes an owned
# copy ("torch": from_dlpack + clone; "ring": jetforge's DeviceFrameRing, what `jetforge app` uses); source: the
# decode layout (core decoder a thread each; "threaded": ThreadedDecoder a thread each; "feed": ThreadedDecoders read
# by one feeder thread; "ipc": worker processes handing frames over CUDA IPC rings; "auto": the app's choice).
VARIANTS = {
    "legacy": {"nonblocking": False, "switch_ms": None, "per_stream": 1, "keep": "torch"},
    "nonblocking": {"nonblocking": True, "switch_ms": None, "per_stream": 1, "keep": "torch"},
    "nb-gil": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 1, "keep": "torch"},
    "nb-gil-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "torch"},
    "ring-gil": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 1, "keep": "ring"},
    "ring-gil-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring"},
    "threaded-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "threaded"},
    "ring-gil-quads": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 4, "keep": "ring"},
    "ipc-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "ipc",
                  "workers": 4},
    "ipc2-pairs": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "ipc",
                   "workers": 2},
    "ipc-quads": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 4, "keep": "ring", "source": "ipc",
                  "workers": 4},
    "feed-pairs": _feed_pairs(),
    # feed-pairs with the owned copies made as before 2026-12-07: two cudaMemcpy2DAsync calls a frame, not one copy
    # kernel launch a fetch (DeviceFrameRing batch_copy): the A/B of that change
    "feed-pairs-copy2d": _feed_pairs(batch_copy=False),
    # feed-pairs with a batch size every 4 from 8 to 32 (26 frames padded to 28), not the app's powers of two
    # (batching.DEFAULT_BUCKETS): measured 2026-12-07 as feed-pairs-pow2 beside the finer sizes, which did not pay
    "feed-pairs-fine4": _feed_pairs(buckets="fine4"),
    # feed-pairs with render on's copy back as the benchmark made it until 2026-12-07 (a batch stacked by torch and
    # copied to pageable memory synchronously), not the app's BatchCopyBack: the A/B of that change (--render-on)
    "feed-pairs-stackcopy": _feed_pairs(copy_back="stack"),
    # feed-pairs with each ThreadedDecoder decoding up to 32 frames ahead, not NvThreadedSource's 12: whether NVDEC
    # idles at 16 streams because a stream's decode-ahead buffer is full while the one feeder thread serves the others
    "feed-pairs-buf32": _feed_pairs(decoder_buffer=32),
    # feed-pairs with the rings' copies on a stream of the device's greatest priority: whether the feeder's
    # once-a-fetch wait for its copy kernel, queued behind the model's kernels, is what holds NVDEC back
    "feed-pairs-prio": _feed_pairs(copy_priority="high"),
    # feed-pairs with each source copying a fetch ahead (NvThreadedSource copy_ahead): a fetch's copies are waited for
    # a fetch later, when they are long done, not right after their launch: whether that wait is the feeder's gap
    "feed-pairs-ahead": _feed_pairs(copy_ahead=True),
    # feed-pairs with each ThreadedDecoder's own GPU work (picture mapping, the copy into its buffer) on a stream of
    # the device's greatest priority: NVDEC of 16 streams gave 9,681 FPS alone and 8,618 beside MobileNetV2 (H100,
    # 2026-12-07), and the pipeline 8,582: whether that work queueing behind the model's kernels is the difference
    "feed-pairs-decprio": _feed_pairs(decoder_priority="high"),
    # threaded-pairs (the app's layout at 1 stream) with each ThreadedDecoder's own GPU work at the device's greatest
    # stream priority: the detector missed at 1 stream (0.80 on the H100, 2026-12-07) where NVDEC bounds it and the
    # model takes ~74 % of its batch-2 rate beside it; whether NVDEC's mapping and copies queueing behind the model's
    # kernels slow a lone stream's decoding (feed-pairs-decprio answered no for 16 streams of MobileNetV2)
    "threaded-pairs-decprio": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring",
                               "source": "threaded", "decoder_priority": "high"},
    # what `jetforge app --decode gpu` does (gpu_app.decode_layout; per_stream and switch_ms from GpuAppOptions)
    "auto": {"nonblocking": True, "switch_ms": 0.5, "per_stream": 2, "keep": "ring", "source": "auto"},
}
DEFAULT_VARIANT = "auto"


#: a variant name ending so runs that layout without the app's per-frame stage timing (TaskOps/PipelineMetrics,
#: added on 2026-12-06): the A/B of the measurement harness itself (``--variants auto-untimed``)
UNTIMED = "-untimed"

#: a variant name ending so decodes the SSD detector's boxes on the host from the raw outputs (as the app does with a
#: session that takes host arrays, e.g. ONNX Runtime).  The app on a TensorRT engine decodes them on the GPU since
#: 2026-12-08 (``jetforge.vision.ssd_gpu.QueuedSsdDecoder``: the kernel queued behind the model on its stream, only the
#: candidates copied back, read back in the result thread), and so do the detector's goal rows; before, the app decoded
#: on the host and the goal rows were measured with the kernel (until 2026-12-07) or, on the CPU only, as the app.
#: ``--variants auto-hostdecode`` measures the host decoding beside them.  No effect on a model without SSD outputs
#: (the plan leaves such models out of these variants).
HOST_DECODE = "-hostdecode"
SUFFIXES = (UNTIMED, HOST_DECODE)


def split_variant(variant: str) -> Tuple[str, bool, bool]:
    """(the layout's name, whether the app's per-frame stage timing is on, whether the SSD boxes are decoded on the
    host instead of the GPU): the suffixes may come in either order."""
    base, found = variant, set()
    while True:
        suffix = next((s for s in SUFFIXES if base.endswith(s)), None)
        if suffix is None:
            return base, UNTIMED not in found, HOST_DECODE in found
        base, found = base[:-len(suffix)], found | {suffix}


def split_untimed(variant: str) -> Tuple[str, bool]:
    """(the layout's name, whether the app's per-frame stage timing is on)."""
    base, timed, _ = split_variant(variant)
    return base, timed


def resolve_variant(variant: str, n: int) -> str:
    """``auto`` -> the variant `jetforge app --decode gpu` uses for N streams; any other name as it is (an
    ``-untimed`` suffix dropped: the layout is the same)."""
    variant = split_untimed(variant)[0]
    if variant != "auto":
        return variant
    from jetforge.apps.pipeline.gpu_app import decode_layout

    return {"processes": "ipc-pairs", "feed": "feed-pairs", "threads": "threaded-pairs"}[decode_layout(n)]


def frame_copy_label(v: Dict[str, Any]) -> str:
    """How a variant's sources make their owned frame copies."""
    if v["keep"] != "ring":
        return "torch clone"
    if v.get("source") == "ipc":
        return "in the decode workers (CUDA IPC rings)"
    if v.get("source") == "feed" and v.get("batch_copy", True):
        return "one copy kernel launch a fetch"
    return "two cudaMemcpy2DAsync a frame"


def variant_label(variant: str, n: int) -> str:
    """A point's variant as the JSON records it: the name, with the layout ``auto`` resolved to after ``=``."""
    used = resolve_variant(variant, n)
    base = split_untimed(variant)[0]
    return variant if used == base else "%s=%s" % (variant, used)  # "auto-untimed=feed-pairs": its own point


__all__ = ["DEFAULT_VARIANT", "HOST_DECODE", "SUFFIXES", "UNTIMED", "VARIANTS", "frame_copy_label", "resolve_variant",
           "split_untimed", "split_variant", "variant_label"]
