"""Slicing-aided detection's host merge (vision.tiles): tile layout, pixel cuts, cut boxes dropped, NMS merge."""

import numpy as np
import pytest

from jetforge.errors import ConfigError
from jetforge.vision.boxes import nms
from jetforge.vision.tiles import TiledPeopleDetector, cut_tile, merge_tiled, tile_pixels, tile_rects

H, W = 200, 300  # a frame of 200 rows, 300 columns: tiles of 120 x 180 px at (0|80, 0|120)


def test_tile_pixels_round_to_whole_pixels_and_cut_views():
    rects = tile_rects(2, 0.6)
    assert [tile_pixels((H, W), r) for r in rects] == [(0, 0, 120, 180), (0, 120, 120, 300), (80, 0, 200, 180),
                                                        (80, 120, 200, 300)]
    image = np.arange(H * W).reshape(H, W)
    tile = cut_tile(image, rects[3])
    assert tile.shape == (120, 180) and tile[0, 0] == image[80, 120] and np.shares_memory(tile, image)
    assert tile_pixels((10, 10), [0.5, 0.5, 0.52, 0.52]) == (5, 5, 6, 6)  # never empty
    with pytest.raises(ConfigError, match="grid of at least 2x2"):
        tile_rects(1, 0.6)
    with pytest.raises(ConfigError, match="side must be between"):
        tile_rects(2, 0.5)


def _merge(*tile_sets, frame=((), ())):
    boxes = [np.array(frame[0], float).reshape(-1, 4)] + [np.array(b, float).reshape(-1, 4) for b, _ in tile_sets]
    scores = [np.array(frame[1], float)] + [np.array(s, float) for _, s in tile_sets]
    return merge_tiled((H, W), tile_rects(2, 0.6), boxes, scores)


def test_merge_maps_tile_boxes_drops_cut_ones_and_keeps_the_best_of_duplicates():
    person = [40.0, 30.0, 70.0, 110.0]  # x1, y1, x2, y2 in the frame, inside tile 0 only
    small = [20.0, 10.0, 35.0, 50.0]  # tile 3's pixels: (140, 90, 155, 130) in the frame
    boxes, scores = _merge(([person, [170.0, 20.0, 179.5, 60.0], [0.0, 20.0, 10.0, 60.0]], [0.95, 0.9, 0.8]),
                           ([[0.5, 20.0, 15.0, 60.0]], [0.85]),  # tile 1: cut by its left edge (x0 = 120 > 0)
                           ([], []),
                           ([small], [0.6]),
                           frame=([person], [0.7]))
    # tile 0: the person again (higher score: the tile's box wins the NMS), a box at its right edge (inner: x1 180
    # < 300, dropped), a box at its left edge (the frame's own edge: kept)
    np.testing.assert_allclose(boxes, [person, [0.0, 20.0, 10.0, 60.0], [140.0, 90.0, 155.0, 130.0]])
    np.testing.assert_allclose(scores, [0.95, 0.8, 0.6])
    # nothing anywhere: empty, well-shaped
    boxes, scores = _merge(([], []), ([], []), ([], []), ([], []))
    assert boxes.shape == (0, 4) and scores.shape == (0,)
    with pytest.raises(ValueError, match="one set per tile"):
        merge_tiled((H, W), tile_rects(2, 0.6), [np.zeros((0, 4))] * 3, [np.zeros(0)] * 3)


def test_the_edge_margin_is_a_fraction_of_the_tile_side():
    # tile 3 starts at (120, 80): its left and top edges are inner; a margin of 0.05 is 9 px across, 6 px down
    near_left = [8.0, 20.0, 40.0, 60.0]
    clear = [10.0, 7.0, 40.0, 60.0]
    boxes, _ = merge_tiled((H, W), tile_rects(2, 0.6), [np.zeros((0, 4)), np.zeros((0, 4)), np.zeros((0, 4)),
                                                         np.zeros((0, 4)), np.array([near_left, clear])],
                           [np.zeros(0)] * 4 + [np.array([0.9, 0.8])], edge=0.05)
    np.testing.assert_allclose(boxes, [[130.0, 87.0, 160.0, 140.0]])


def _former_merge_tiled(frame_shape, rects, boxes, scores, edge=0.01, merge_iou=0.5, max_output=100):
    """runtime/tiles.py ``merge_tiled`` before issue 23 (its own cut rule, written out here)."""
    h, w = int(frame_shape[0]), int(frame_shape[1])
    all_boxes, all_scores = [np.asarray(boxes[0], np.float64).reshape(-1, 4)], [np.asarray(scores[0], np.float64)]
    for rect, b, s in zip(rects, boxes[1:], scores[1:]):
        y0, x0, y1, x1 = tile_pixels((h, w), rect)
        b, s = np.asarray(b, np.float64).reshape(-1, 4), np.asarray(s, np.float64).reshape(-1)
        mx, my = edge * (x1 - x0), edge * (y1 - y0)
        cut = np.zeros(len(b), dtype=bool)
        if x0 > 0:
            cut |= b[:, 0] < mx
        if y0 > 0:
            cut |= b[:, 1] < my
        if x1 < w:
            cut |= b[:, 2] > (x1 - x0) - mx
        if y1 < h:
            cut |= b[:, 3] > (y1 - y0) - my
        all_boxes.append(b[~cut] + np.array([x0, y0, x0, y0], dtype=np.float64))
        all_scores.append(s[~cut])
    merged_boxes, merged_scores = np.concatenate(all_boxes), np.concatenate(all_scores)
    keep = nms(merged_boxes, merged_scores, merge_iou, -np.inf, max_output)
    return merged_boxes[keep], merged_scores[keep]


@pytest.mark.parametrize("grid", [2, 3, 4])
def test_the_merge_is_the_former_one_on_random_tile_detections(grid):
    """The cut rule is now one expression shared with the distillation's torch merge (cut_by_inner_edge); the apps'
    merge still gives exactly what it gave, including boxes right at the edge margin and duplicates."""
    from jetforge.vision.tiles import tile_side_for

    rng = np.random.default_rng(grid)
    rects = tile_rects(grid, tile_side_for(grid))
    for shape in ((576, 768), (272, 640), (144, 176)):
        for _ in range(30):
            boxes, scores = [], []
            for rect in [None] + list(rects):
                th, tw = (shape if rect is None else
                          np.subtract(tile_pixels(shape, rect)[2:], tile_pixels(shape, rect)[:2]))
                n = int(rng.integers(0, 12))
                xy = rng.integers(-2, 4, size=(n, 2)) * np.array([tw, th]) / 8.0
                wh = rng.integers(1, 5, size=(n, 2)) * np.array([tw, th]) / 8.0
                b = np.concatenate([xy, xy + wh], axis=1)
                b[: n // 3, 0] = 0.01 * tw - rng.integers(0, 2, size=len(b[: n // 3]))  # at the margin
                boxes.append(b.astype(np.float32))
                scores.append((rng.integers(1, 10, size=n) / 10.0).astype(np.float32))
            got = merge_tiled(shape, rects, boxes, scores)
            want = _former_merge_tiled(shape, rects, boxes, scores)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_the_tiled_detector_hands_on_detections_in_frame_pixels():
    from jetforge.vision.detections import Detections

    class Fixed:  # a box in the middle of every image it sees, in that image's pixels
        label = "fixed"

        def detect_batch(self, images):
            return [Detections(np.array([[0.4 * i.shape[1], 0.3 * i.shape[0], 0.6 * i.shape[1],
                                          0.7 * i.shape[0]]], np.float32), np.array([0.9], np.float32))
                    for i in images]

    found = TiledPeopleDetector(Fixed(), grid=2).detect_batch([np.zeros((H, W, 3), np.uint8)])
    assert len(found) == 1 and isinstance(found[0], Detections) and found[0].boxes.dtype == np.float32
    assert found[0].classes.tolist() == [0] * len(found[0])
