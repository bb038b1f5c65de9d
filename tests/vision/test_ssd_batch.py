"""The batched SSD selection equals the per-frame one (``select_detections``) frame by frame, bit for bit.

The per-frame function is the reference: it is itself held to TensorFlow's postprocess (test_ssd.py,
test_boxes.py and the port's TensorFlow check).  The cases are made to hit every rule: score ties (the earlier anchor wins),
identical and nested boxes, boxes with corners swapped, empty boxes, boxes partly outside the image (clipped,
then dropped when empty), NaN scores, ``max_per_class`` / ``max_total`` smaller than what survives, frames
without candidates, several classes whose detections interleave by score, and the per-frame fallback when a
frame has too many candidates for one table.
"""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetforge.vision.boxes import NMS_TABLE_MAX
from jetforge.vision.ssd import SSDSpec, select_detections, ssd_anchor_layers
from jetforge.vision.ssd_batch import TABLE_CELLS_MAX, select_detections_batch

LAYERS = tuple(ssd_anchor_layers([(19, 19), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1)]))


def make_spec(classes: int = 1, **kw) -> SSDSpec:
    labels = ("person", "bicycle", "car", "dog")[:classes]
    return SSDSpec(LAYERS, labels=labels, **kw)


def candidates(rng: np.random.Generator, frames: int, per_frame: int, classes: int, quantum: float = 0.05):
    """Rows of many frames in anchor order within each frame; coarse boxes and scores so that ties happen."""
    counts = rng.integers(0, per_frame + 1, frames)
    counts[rng.integers(0, frames)] = 0  # at least one frame without candidates
    frame_of = np.repeat(np.arange(frames), counts)
    n = len(frame_of)
    centre = rng.uniform(-0.1, 1.1, (n, 2))
    size = rng.choice([0.0, 0.1, 0.2, 0.3], (n, 2))
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1)
    swap = rng.random(n) < 0.2  # corners given the other way round: IoU sorts them
    boxes[swap] = boxes[swap][:, [2, 3, 0, 1]]
    dup = rng.random(n) < 0.15  # exact copies of the previous box
    boxes[1:][dup[1:]] = boxes[:-1][dup[1:]]
    boxes = np.round(boxes / quantum) * quantum
    scores = np.round(rng.uniform(0.0, 1.0, (n, classes)) / quantum) * quantum
    scores[rng.random((n, classes)) < 0.02] = np.nan
    order = rng.permutation(n)  # shuffle, then put back in frame order keeping the shuffled order as "anchors"
    order = order[np.argsort(frame_of[order], kind="stable")]
    return boxes[order].astype(np.float32), scores[order].astype(np.float32), frame_of[order]


def per_frame(boxes, scores, frame_of, frames, spec, threshold):
    return [select_detections(boxes[frame_of == f], scores[frame_of == f], spec, threshold) for f in range(frames)]


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.boxes.dtype == w.boxes.dtype and g.scores.dtype == w.scores.dtype
        assert g.classes.dtype == w.classes.dtype and g.labels == w.labels
        assert g.boxes.shape == w.boxes.shape
        assert np.array_equal(g.boxes, w.boxes) and np.array_equal(g.scores, w.scores)
        assert np.array_equal(g.classes, w.classes)


@pytest.mark.parametrize("classes", [1, 3])
@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.6])
@pytest.mark.parametrize("limits", [(100, 100), (3, 100), (100, 4), (2, 3)])
def test_equals_per_frame_selection(classes, threshold, limits):
    spec = make_spec(classes, max_per_class=limits[0], max_total=limits[1], iou_threshold=0.5)
    rng = np.random.default_rng(hash((classes, threshold, limits)) % 2 ** 32)
    boxes, scores, frame_of = candidates(rng, frames=12, per_frame=40, classes=classes)
    want = per_frame(boxes, scores, frame_of, 12, spec, threshold)
    assert sum(len(w) for w in want) > 0 and any(len(w) == 0 for w in want)
    assert_same(select_detections_batch(boxes, scores, frame_of, 12, spec, threshold), want)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 31), frames=st.integers(1, 9), per_frame_max=st.integers(0, 30),
       classes=st.integers(1, 3), iou=st.sampled_from([0.0, 0.3, 0.6, 1.0]), threshold=st.sampled_from([0.0, 0.5]),
       max_per_class=st.integers(1, 8), max_total=st.integers(1, 8))
def test_property_equals_per_frame_selection(seed, frames, per_frame_max, classes, iou, threshold, max_per_class,
                                             max_total):
    spec = make_spec(classes, max_per_class=max_per_class, max_total=max_total, iou_threshold=iou)
    boxes, scores, frame_of = candidates(np.random.default_rng(seed), frames, per_frame_max, classes)
    assert_same(select_detections_batch(boxes, scores, frame_of, frames, spec, threshold),
                per_frame(boxes, scores, frame_of, frames, spec, threshold))


def test_rows_of_frames_given_in_any_frame_order_keep_their_order_within_a_frame():
    spec = make_spec(1)
    boxes, scores, frame_of = candidates(np.random.default_rng(3), frames=6, per_frame=25, classes=1)
    mixed = np.lexsort((np.arange(len(frame_of)), -frame_of))  # frames backwards, rows in order within a frame
    assert_same(select_detections_batch(boxes[mixed], scores[mixed], frame_of[mixed], 6, spec, 0.2),
                per_frame(boxes, scores, frame_of, 6, spec, 0.2))


def test_too_many_candidates_for_one_table_fall_back_to_the_per_frame_code():
    spec = make_spec(1)
    rng = np.random.default_rng(8)
    n = NMS_TABLE_MAX + 40  # one frame above the table's size: the per-frame path (which itself runs NMS in rounds)
    boxes = np.sort(rng.uniform(0, 1, (n, 4)).astype(np.float32).reshape(n, 2, 2), axis=1).reshape(n, 4)
    boxes = boxes[:, [0, 2, 1, 3]]
    scores = rng.uniform(0.2, 1.0, (n, 1)).astype(np.float32)
    frame_of = np.zeros(n, np.int64)
    assert_same(select_detections_batch(boxes, scores, frame_of, 2, spec, 0.1),
                per_frame(boxes, scores, frame_of, 2, spec, 0.1))
    frames = TABLE_CELLS_MAX // (60 * 60) + 1  # many frames of 60 candidates: the tables would be too large
    boxes, scores, frame_of = candidates(np.random.default_rng(9), frames, 60, 1)
    frame_of[:60] = 0  # frame 0 with exactly 60 rows
    boxes, scores = boxes[np.argsort(frame_of, kind="stable")], scores[np.argsort(frame_of, kind="stable")]
    frame_of = np.sort(frame_of, kind="stable")
    assert_same(select_detections_batch(boxes, scores, frame_of, frames, spec, 0.0),
                per_frame(boxes, scores, frame_of, frames, spec, 0.0))


def test_no_candidates_at_all():
    spec = make_spec(2)
    got = select_detections_batch(np.zeros((0, 4), np.float32), np.zeros((0, 2), np.float32), np.zeros(0, np.int64),
                                  3, spec, 0.5)
    assert_same(got, per_frame(np.zeros((0, 4), np.float32), np.zeros((0, 2), np.float32), np.zeros(0, np.int64),
                               3, spec, 0.5))


def test_real_detector_candidates_of_four_vtest_frames():
    """The person detector's outputs on four real vtest.avi frames, decoded as the GPU decoder's candidates."""
    import json

    from jetforge.runtime.cuda.kernels.ssd import kernel_threshold
    from jetforge.vision.ssd_gpu import candidates_reference

    data = np.load(str(Path(__file__).resolve().parents[1] / "runtime" / "gpu_kernels" / "data" / "ssd_person_vtest.npz"))
    spec = SSDSpec.from_dict(json.loads(str(data["spec"])))
    for threshold in (0.05, 0.3, 0.5):
        records = candidates_reference(data["enc"], data["logits"], spec, kernel_threshold(threshold))
        ids = records.view(np.int32)
        records = records[np.lexsort((ids[:, 0], ids[:, 1]))]
        frame_of = records.view(np.int32)[:, 1].astype(np.int64)
        boxes, scores, frames = records[:, 2:6], records[:, 6:], len(data["enc"])
        want = per_frame(boxes, scores, frame_of, frames, spec, threshold)
        assert all(len(w) > 0 for w in want)
        assert_same(select_detections_batch(boxes, scores, frame_of, frames, spec, threshold), want)


@pytest.mark.parametrize("threshold", [0.05, 0.3, 0.5])
def test_postprocess_batch_equals_postprocess_on_real_and_random_outputs(threshold):
    """The whole host postprocess (decode, then the batched selection) against the per-frame one."""
    import json

    from jetforge.vision.ssd import postprocess
    from jetforge.vision.ssd_batch import postprocess_batch

    data = np.load(str(Path(__file__).resolve().parents[1] / "runtime" / "gpu_kernels" / "data" / "ssd_person_vtest.npz"))
    spec = SSDSpec.from_dict(json.loads(str(data["spec"])))
    rng = np.random.default_rng(int(threshold * 100))
    noisy = data["logits"] + rng.normal(0, 1.0, data["logits"].shape).astype(np.float32)
    for enc, logits in ((data["enc"], data["logits"]), (data["enc"], noisy), (data["enc"][:1], data["logits"][:1])):
        want = postprocess(enc, logits, spec, score_threshold=threshold)
        assert_same(postprocess_batch(enc, logits, spec, score_threshold=threshold), want)
