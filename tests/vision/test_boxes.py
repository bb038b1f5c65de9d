"""jetforge's one IoU and one greedy NMS (jetforge.vision.boxes), and the callers they replaced.

The rules of the ``"iou"`` overlap are TensorFlow's (the SSD decoder's own tests, moved here with the NMS).  Each
former implementation is kept below verbatim as a reference, and the single one must give the same indices on
its callers' inputs: MTCNN's torchvision-style NMS (PNet/RNet stages), facenet's ``"Min"`` NMS (ONet stage),
OpenCV's ``cv2.dnn.NMSBoxes`` on HOG's windows, and the trackers' float64 ``iou_matrix``.
"""

import numpy as np
import pytest

from jetforge.errors import ConfigError
from jetforge.vision.boxes import iou_matrix, nms


def test_nms_rules():
    boxes = np.array([[0, 0, 1, 1], [0, 0, 1, 2], [0, 0, 1, 1.6], [5, 5, 6, 6], [5, 5, 6, 6]], dtype=np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.6], dtype=np.float32)
    # IoU(0, 1) = 0.5 exactly: kept at threshold 0.5 (suppression needs IoU above it); IoU(0, 2) = 0.625
    assert nms(boxes, scores, 0.5, 0.0, 10).tolist() == [0, 1, 3]
    assert nms(boxes, scores, 0.49, 0.0, 10).tolist() == [0, 3]
    # equal scores: the lower index first; only scores above the threshold take part; max_output is a cap
    assert nms(boxes, scores, 0.5, 0.6, 10).tolist() == [0, 1]
    assert nms(boxes, scores, 0.5, 0.0, 2).tolist() == [0, 1]
    assert nms(boxes[:0], scores[:0], 0.5, 0.0, 10).tolist() == []



def _greedy_nms_reference(boxes, scores, iou_threshold, score_threshold, max_output):
    """TensorFlow's greedy NMS written out pair by pair with float32 scalars (independent of jetforge.vision)."""
    f = np.float32
    ids = sorted((i for i in range(len(scores)) if scores[i] > score_threshold), key=lambda i: (-scores[i], i))

    def iou(a, b):
        ay1, ax1, ay2, ax2 = min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3])
        by1, bx1, by2, bx2 = min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])
        area_a, area_b = (ay2 - ay1) * (ax2 - ax1), (by2 - by1) * (bx2 - bx1)
        if area_a <= 0 or area_b <= 0:
            return f(0)
        inter = max(min(ay2, by2) - max(ay1, by1), f(0)) * max(min(ax2, bx2) - max(ax1, bx1), f(0))
        return inter / (area_a + area_b - inter)

    keep = []
    for i in ids:
        if len(keep) == max_output:
            break
        if all(not iou(boxes[k], boxes[i]) > iou_threshold for k in keep):
            keep.append(i)
    return keep


@pytest.mark.parametrize("table_max", [0, 10_000])  # every call through the per-round path / the IoU table
def test_nms_matches_a_pairwise_reference_on_ties_and_degenerate_boxes(monkeypatch, table_max):
    """Coarse grids make equal scores, identical boxes, IoU exactly at the threshold, empty and flipped boxes."""
    import jetforge.vision.boxes as boxes_module

    monkeypatch.setattr(boxes_module, "NMS_TABLE_MAX", table_max)
    rng = np.random.default_rng(7)
    for trial in range(400):
        n = int(rng.integers(0, 40))
        corner = rng.integers(0, 4, size=(n, 2)).astype(np.float32) / 4
        size = rng.integers(-1, 4, size=(n, 2)).astype(np.float32) / 4  # negative: a flipped box
        boxes = np.concatenate([corner, corner + size], axis=1)
        if trial % 3 == 0:
            boxes = boxes[:, [2, 3, 0, 1]]
        scores = rng.integers(0, 5, size=n).astype(np.float32) / 5
        for iou_threshold in (0.0, 0.25, 0.5, 1.0):
            for max_output in (1, 3, 100):
                got = nms(boxes, scores, iou_threshold, 0.1, max_output).tolist()
                assert got == _greedy_nms_reference(boxes, scores, iou_threshold, 0.1, max_output)




# ---- the former implementations, verbatim (before issue 23 moved everything to jetforge.vision.boxes) ------------
def _former_mtcnn_nms(boxes, scores, threshold):
    """apps/tasks/detectors/mtcnn.py ``nms``: torchvision.ops.nms in float32, stable order."""
    if boxes.shape[0] == 0:
        return np.zeros((0,), np.int64)
    x1, y1, x2, y2 = (boxes[:, k].astype(np.float32) for k in range(4))
    area = (x2 - x1) * (y2 - y1)
    order = np.argsort(-scores, kind="stable")
    keep = []
    suppressed = np.zeros(boxes.shape[0], bool)
    for pos, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[pos + 1:]
        rest = rest[~suppressed[rest]]
        if rest.size == 0:
            continue
        w = np.maximum(np.float32(0), np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        h = np.maximum(np.float32(0), np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = w * h
        with np.errstate(invalid="ignore", divide="ignore"):  # two empty boxes: 0 / 0, never above a threshold
            iou = inter / (area[i] + area[rest] - inter)
        suppressed[rest[iou > threshold]] = True
    return np.asarray(keep, np.int64)


def _former_mtcnn_nms_min(boxes, scores, threshold):
    """apps/tasks/detectors/mtcnn.py ``nms_min``: facenet-pytorch's ``nms_numpy(..., "Min")``."""
    if boxes.shape[0] == 0:
        return np.zeros((0,), np.int64)
    x1, y1, x2, y2 = (boxes[:, k].copy() for k in range(4))
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = np.argsort(scores, kind="stable")
    pick = []
    while order.size > 0:
        i = order[-1]
        pick.append(i)
        idx = order[0:-1]
        w = np.maximum(0.0, np.minimum(x2[i], x2[idx]) - np.maximum(x1[i], x1[idx]) + 1)
        h = np.maximum(0.0, np.minimum(y2[i], y2[idx]) - np.maximum(y1[i], y1[idx]) + 1)
        o = (w * h) / np.minimum(area[i], area[idx])
        order = order[np.where(o <= threshold)]
    return np.asarray(pick, np.int64)


def _former_iou_matrix(a, b):
    """runtime/boxes.py ``iou_matrix`` (the tracker's, the faces app's and the AP metrics')."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def _mtcnn_like(rng, n, grid=True):
    """Boxes as MTCNN's stages see them (x1 <= x2, y1 <= y2; pixel units, some on a coarse grid so that boxes,
    overlaps and float32 scores tie, some empty) and scores with ties (probabilities that saturate at 1)."""
    xy = rng.uniform(0, 200, size=(n, 2))
    wh = rng.uniform(0, 60, size=(n, 2))
    if grid:
        xy, wh = np.round(xy / 8) * 8, np.round(wh / 8) * 8
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = np.minimum(rng.uniform(0.5, 1.2, size=n), 1.0).astype(np.float32)
    if grid:
        scores = (np.round(scores * 10) / 10).astype(np.float32)
    return boxes, scores


@pytest.mark.parametrize("table_max", [0, 10_000])
def test_the_iou_rule_is_mtcnns_former_torchvision_nms(monkeypatch, table_max):
    import jetforge.vision.boxes as boxes_module

    monkeypatch.setattr(boxes_module, "NMS_TABLE_MAX", table_max)
    rng = np.random.default_rng(3)
    for trial in range(300):
        boxes, scores = _mtcnn_like(rng, int(rng.integers(0, 60)), grid=trial % 2 == 0)
        for threshold in (0.5, 0.7):
            assert nms(boxes, scores, threshold).tolist() == _former_mtcnn_nms(boxes, scores, threshold).tolist()


@pytest.mark.parametrize("table_max", [0, 10_000])
def test_the_min_rule_is_facenets_min_nms(monkeypatch, table_max):
    """Equal scores the later box first, inclusive +1 pixel sizes, overlap over the smaller box, <= keeps."""
    import jetforge.vision.boxes as boxes_module

    monkeypatch.setattr(boxes_module, "NMS_TABLE_MAX", table_max)
    rng = np.random.default_rng(4)
    for trial in range(300):
        boxes, scores = _mtcnn_like(rng, int(rng.integers(0, 60)), grid=trial % 2 == 0)
        for threshold in (0.3, 0.7):
            got = nms(boxes, scores, threshold, overlap="min").tolist()
            assert got == _former_mtcnn_nms_min(boxes, scores, threshold).tolist()
    # the tie rule on its own: two equal boxes with equal scores keep the later one
    same = np.array([[0, 0, 9, 9], [0, 0, 9, 9]], np.float32)
    assert nms(same, np.ones(2, np.float32), 0.7, overlap="min").tolist() == [1]
    assert nms(same, np.ones(2, np.float32), 0.7).tolist() == [0]


def test_the_iou_rule_is_opencvs_nmsboxes_on_hog_windows():
    """HOG's windows are whole pixels (x, y, w, h); OpenCV's NMSBoxes keeps a score above the score threshold
    and a box whose IoU with every kept one is at most the threshold -- exactly what the single NMS does."""
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(5)
    for trial in range(300):
        n = int(rng.integers(1, 40))
        xy = rng.integers(0, 700, size=(n, 2))
        wh = rng.choice([64, 72, 80, 96, 128, 160], size=(n, 1)) * np.array([[1, 2]])
        rects = np.concatenate([xy, wh], axis=1).astype(np.float32)
        scores = (rng.integers(0, 40, size=n) / 10.0).astype(np.float32)
        for min_score, threshold in ((0.2, 0.45), (0.3, 0.45), (0.0, 0.3)):
            want = np.asarray(cv2.dnn.NMSBoxes([list(map(float, r)) for r in rects], [float(s) for s in scores],
                                               min_score, threshold), dtype=np.int64).reshape(-1)
            corners = np.concatenate([rects[:, :2], rects[:, :2] + rects[:, 2:]], axis=1)
            assert nms(corners, scores, threshold, score_threshold=min_score).tolist() == want.tolist()


def test_iou_matrix_is_the_former_one_bit_for_bit():
    rng = np.random.default_rng(6)
    for trial in range(200):
        a = rng.integers(-2, 6, size=(int(rng.integers(0, 12)), 4)).astype(np.float64) * 7.5
        b = rng.integers(-2, 6, size=(int(rng.integers(0, 12)), 4)).astype(np.float64) * 7.5
        if trial % 2:  # proper boxes (x2 >= x1) of any size, as the tracker and the AP metric give it
            a[:, 2:] = a[:, :2] + np.abs(a[:, 2:])
            b[:, 2:] = b[:, :2] + np.abs(b[:, 2:])
        got, want = iou_matrix(a, b), _former_iou_matrix(a, b)
        assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
    assert iou_matrix(np.zeros((0, 4)), np.zeros((3, 4))).shape == (0, 3)


def test_an_unknown_overlap_is_refused():
    with pytest.raises(ConfigError, match="overlap"):
        nms(np.zeros((1, 4)), np.ones(1), 0.5, overlap="giou")
