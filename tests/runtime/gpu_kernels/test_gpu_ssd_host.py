"""The host half of the GPU SSD decoder, on any CPU: the kernel's output modelled in numpy, finished on the host.

``candidates_reference`` computes what the kernel writes (decoded boxes and scores of the anchors above
the threshold, in any order) with runtime.detection's own numpy functions; ``finish`` must turn that
into exactly ``detection.postprocess``'s detections.  The kernel itself is held to this on a GPU
(test_kernels_gpu.py).
"""

from pathlib import Path

import numpy as np
import pytest

from jetforge.runtime.cuda.kernels.ssd import anchor_centres, effective_threshold, kernel_threshold, record_width
from jetforge.vision.ssd import SSDSpec, decode_boxes, postprocess, ssd_anchor_layers
from jetforge.vision.ssd_gpu import candidates_reference, finish


@pytest.fixture(scope="module")
def spec():
    """The person detector's anchor layout (1917 anchors, 300x300)."""
    return SSDSpec(tuple(ssd_anchor_layers([(19, 19), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1)])))


def outputs(spec, frames, seed, classes=None):
    rng = np.random.default_rng(seed)
    a, c = spec.num_anchors, classes or spec.num_classes
    enc = rng.normal(0.0, 1.0, (frames, a, 4)).astype(np.float32)
    logits = rng.normal(-2.0, 2.5, (frames, a, c)).astype(np.float32)
    logits[:, 100:110, 1] = 1.5  # equal scores on neighbouring anchors: NMS must break ties by anchor index
    return enc, logits


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.9])
def test_candidates_in_any_order_give_postprocess_detections(spec, threshold):
    enc, logits = outputs(spec, 3, seed=int(threshold * 10))
    t = effective_threshold(spec, threshold)
    records = candidates_reference(enc, logits, spec, kernel_threshold(t))
    assert records.shape[1] == record_width(spec) == 7
    assert len(records) < 0.5 * 3 * spec.num_anchors  # only a part of the anchors comes back
    np.random.default_rng(1).shuffle(records)  # the kernel's atomic append has no order
    got = finish(records, 3, spec, t)
    want = postprocess(enc, logits, spec, score_threshold=threshold)
    assert [len(g) for g in got] == [len(w) for w in want] and sum(len(w) for w in want) > 0
    for g, w in zip(got, want):
        assert np.array_equal(g.boxes, w.boxes) and np.array_equal(g.scores, w.scores)
        assert np.array_equal(g.classes, w.classes)


def enc_count(data) -> int:
    return int(data["enc"].shape[1])


def test_real_detector_outputs(spec):
    """The person detector's outputs on four vtest.avi frames (data/ssd_person_vtest.npz): same detections."""
    import json

    data = np.load(str(Path(__file__).resolve().parent / "data" / "ssd_person_vtest.npz"))
    real = SSDSpec.from_dict(json.loads(str(data["spec"])))
    assert real.num_anchors == spec.num_anchors == enc_count(data)
    enc, logits = data["enc"], data["logits"]
    for threshold in (0.3, 0.5):
        t = effective_threshold(real, threshold)
        records = candidates_reference(enc, logits, real, kernel_threshold(t))
        assert len(records) < 0.05 * enc.shape[0] * real.num_anchors  # a few hundred floats, not 1917 x 6 a frame
        got, want = finish(records[::-1].copy(), len(enc), real, t), postprocess(enc, logits, real, threshold)
        assert all(len(w) > 0 for w in want)
        for g, w in zip(got, want):
            assert np.array_equal(g.boxes, w.boxes) and np.array_equal(g.scores, w.scores)


def test_several_classes_and_softmax(spec):
    multi = SSDSpec(spec.layers, labels=("person", "bicycle", "car"), score_converter="softmax")
    enc, logits = outputs(multi, 2, seed=5, classes=4)
    records = candidates_reference(enc, logits, multi, kernel_threshold(0.4))
    got = finish(records, 2, multi, 0.4)
    want = postprocess(enc, logits, multi, score_threshold=0.4)
    for g, w in zip(got, want):
        assert np.array_equal(g.classes, w.classes) and np.array_equal(g.boxes, w.boxes)
        assert set(g.classes.tolist()) >= {0, 1}


def test_anchor_centres_decode_as_the_host_does(spec):
    """Decoding with the uploaded (yc, xc, h, w) gives decode_boxes's boxes bit for bit (same float32 steps)."""
    enc, _ = outputs(spec, 1, seed=3)
    c = anchor_centres(spec)
    f = np.float32
    e = enc[0]
    ty, tx, th, tw = e[:, 0] / f(10), e[:, 1] / f(10), e[:, 2] / f(5), e[:, 3] / f(5)
    w, h = np.exp(tw) * c[:, 3], np.exp(th) * c[:, 2]
    yc, xc = ty * c[:, 2] + c[:, 0], tx * c[:, 3] + c[:, 1]
    ours = np.stack([yc - h / f(2), xc - w / f(2), yc + h / f(2), xc + w / f(2)], axis=1)
    assert np.array_equal(ours, decode_boxes(enc, spec.anchors(), spec.scale_factors)[0])


def test_kernel_threshold_never_drops_what_the_host_keeps():
    """Whether the host compares float32 scores with the threshold in float64 (NumPy 1) or rounded to float32
    (NumPy 2's rule for Python floats), every score it keeps is above the kernel's float32 threshold."""
    for t in (1e-8, 0.1, 0.3, 0.5, 0.7):
        k = kernel_threshold(t)
        assert k <= t and k <= float(np.float32(t)) and float(np.float32(k)) == k
        assert float(np.nextafter(np.float32(k), np.float32(np.inf))) > t  # the largest such float32
    assert effective_threshold(SSDSpec(tuple(ssd_anchor_layers([(1, 1)])), score_threshold=0.2), 0.1) == 0.2


def test_without_a_gpu_the_kernels_are_one_clear_error():
    """On a machine without a driver (CI), making a kernel object fails with a BackendError, not a traceback."""
    from jetforge.errors import JetforgeError
    from jetforge.optional import is_available

    if not is_available("cuda.bindings.runtime"):
        pytest.skip("cuda-python is not installed")
    from jetforge.runtime.cuda import device_count

    if device_count() > 0:
        pytest.skip("a CUDA GPU is present (test_kernels_gpu.py covers it)")
    from jetforge.runtime.cuda.kernels import GpuPreprocessor
    from jetforge.runtime.inputs import Preprocess
    from jetforge.vision.ssd_gpu import GpuSsdDecoder

    with pytest.raises(JetforgeError, match="cuda|CUDA|driver"):
        GpuPreprocessor(Preprocess(), batch=4)
    with pytest.raises(JetforgeError, match="cuda|CUDA|driver"):
        GpuSsdDecoder(SSDSpec(tuple(ssd_anchor_layers([(2, 2)]))), batch=2)


def test_no_candidates_is_no_detections(spec):
    got = finish(np.zeros((0, record_width(spec)), np.float32), 2, spec, 0.5)
    assert [len(d) for d in got] == [0, 0] and got[0].boxes.shape == (0, 4)
