"""Slicing-aided detection's host merge (runtime.tiles): tile layout, pixel cuts, cut boxes dropped, NMS merge."""

import numpy as np
import pytest

from jetforge.errors import ConfigError
from jetforge.runtime.tiles import cut_tile, merge_tiled, tile_pixels, tile_rects

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
