"""The tiled teacher's geometry and merge: tile layout, mirrored views, cut boxes dropped, duplicates merged."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from jetforge.compress.distill.detection_crossgrid import (CrossGridConfig, CrossGridTargets,  # noqa: E402
                                                           anchors_tensor, encode_boxes, student_spec)
from jetforge.compress.distill.detection_tiles import tile_boxes_in_view, tiles_in_view  # noqa: E402
from jetforge.vision.tiles import cut_tile, tile_rects  # noqa: E402
from jetforge.errors import CompressError, ConfigError  # noqa: E402

from test_detector_crossgrid import teacher_spec  # noqa: E402


def test_tile_rects_cover_the_view_with_overlapping_zoomed_tiles():
    np.testing.assert_allclose(tile_rects(2, 0.6), [[0, 0, .6, .6], [0, .4, .6, 1], [.4, 0, 1, .6], [.4, .4, 1, 1]])
    three = tile_rects(3, 0.4)
    assert three.shape == (9, 4)
    np.testing.assert_allclose(three[:3, 1], [0.0, 0.3, 0.6])  # evenly spread; the last one ends at the edge
    np.testing.assert_allclose(three[-1], [0.6, 0.6, 1.0, 1.0])
    for grid, side in ((1, 0.6), (2, 0.5), (2, 1.0), (3, 0.3)):
        with pytest.raises(ConfigError, match="tile"):
            tile_rects(grid, side)
    with pytest.raises(ValueError, match="tile_grid"):
        CrossGridConfig(tile_grid=1)
    with pytest.raises(ValueError, match="tile_side"):
        CrossGridConfig(tile_grid=2, tile_side=0.45)


def _extent(image: np.ndarray) -> np.ndarray:
    """``[y0, x0, y1, x1]`` of an image's nonzero pixels, normalised to the image (x1, y1 exclusive)."""
    ys, xs = np.nonzero(image)
    h, w = image.shape
    return np.array([ys.min() / h, xs.min() / w, (ys.max() + 1) / h, (xs.max() + 1) / w])


@pytest.mark.parametrize("flip", [False, True])
def test_a_box_seen_in_a_tile_maps_back_to_where_it_is_in_the_view(flip):
    # a 200x300 view with one "person" (a filled rectangle) inside tile 3 (bottom right) only
    view = np.zeros((200, 300), np.uint8)
    view[120:190, 200:230] = 1
    rects = tile_rects(2, 0.6)
    # the tile as the bank cuts it: from the unmirrored pixels, then mirrored with its view
    tile = cut_tile(torch.from_numpy(view[..., None]), rects[3]).numpy()[..., 0]
    seen = _extent(tile[:, ::-1] if flip else tile)  # the box the teacher would find in that tile
    shown = view[:, ::-1] if flip else view
    where = tiles_in_view(torch.from_numpy(rects), torch.tensor([flip]))
    boxes = torch.zeros(1, 4, 1, 4, dtype=torch.float32)
    boxes[0, 3, 0] = torch.from_numpy(seen)
    mapped, valid = tile_boxes_in_view(boxes, torch.ones(1, 4, 1, dtype=torch.bool), where, edge=0.01)
    # exact up to float rounding: the tile starts on a whole pixel (0.4 * 200, 0.4 * 300)
    np.testing.assert_allclose(mapped[0, 3, 0].numpy(), _extent(shown), atol=1e-6)
    assert bool(valid[0, 3, 0])


def test_boxes_cut_by_an_inner_tile_edge_are_dropped_and_the_view_edges_are_not_inner():
    rects = torch.from_numpy(tile_rects(2, 0.6))
    where = tiles_in_view(rects, torch.tensor([False, True]))
    # in tile 0 (top left): touching its left edge (the view's edge), then its right edge (inside the view)
    left = torch.tensor([0.3, 0.0, 0.7, 0.2])
    right = torch.tensor([0.3, 0.85, 0.7, 0.995])
    boxes = torch.stack([left, right]).view(1, 1, 2, 4).expand(2, 4, 2, 4).contiguous()
    _, valid = tile_boxes_in_view(boxes, torch.ones(2, 4, 2, dtype=torch.bool), where, edge=0.01)
    assert valid[0, 0].tolist() == [True, False]
    # mirrored view: tile 0 now sits at the right of the view, so its right edge is the view's and its left is inner
    assert valid[1, 0].tolist() == [False, True]
    # tile 3 (bottom right, unmirrored): its left and top edges are inner
    assert valid[0, 3].tolist() == [False, True]
    # invalid stays invalid
    _, none = tile_boxes_in_view(boxes, torch.zeros(2, 4, 2, dtype=torch.bool), where, edge=0.01)
    assert not bool(none.any())


def test_the_torch_cut_is_the_former_one_and_the_apps_rule():
    """The torch merge now runs the apps' own cut rule (jetforge.vision.tiles.cut_by_inner_edge): the same validity
    as its former expression, on random boxes right at the edge margins of every tile of mirrored and plain views."""
    from jetforge.vision.tiles import cut_by_inner_edge

    gen = torch.Generator().manual_seed(0)
    for grid, side in ((2, 0.6), (3, 0.4), (4, 0.3)):
        where = tiles_in_view(torch.from_numpy(tile_rects(grid, side)), torch.tensor([False, True, False]))
        n, t = where.shape[:2]
        boxes = torch.randint(-1, 11, (n, t, 64, 4), generator=gen).float() / 10.0 + 0.01 * torch.randint(
            -1, 2, (n, t, 64, 4), generator=gen).float()  # on, just inside and just outside the 0.01 margin
        valid = torch.rand(n, t, 64, generator=gen) > 0.2
        _, got = tile_boxes_in_view(boxes, valid, where, edge=0.01)
        y0, x0, y1, x1 = (where[..., i].unsqueeze(-1) for i in range(4))
        inner_top, inner_left, inner_bottom, inner_right = y0 > 0, x0 > 0, y1 < 1, x1 < 1
        former = ((inner_top & (boxes[..., 0] < 0.01)) | (inner_left & (boxes[..., 1] < 0.01))
                  | (inner_bottom & (boxes[..., 2] > 1.0 - 0.01)) | (inner_right & (boxes[..., 3] > 1.0 - 0.01)))
        assert torch.equal(got, valid & ~former)
        # the numpy form of the same rule, in the tile's normalised units, says the same box by box
        b = boxes.numpy()
        cut = cut_by_inner_edge(b[..., 1], b[..., 0], b[..., 3], b[..., 2],
                                tuple(v.numpy() for v in (inner_left, inner_top, inner_right, inner_bottom)),
                                (1.0, 1.0), 0.01)
        assert np.array_equal(cut, former.numpy())


def _outputs(anchors: torch.Tensor, people, count: int):
    """Teacher outputs on ``count`` inputs: each ``(input, anchor, box, logit)`` of ``people`` placed on one anchor."""
    enc = torch.zeros(count, anchors.shape[0], 4)
    logits = torch.full((count, anchors.shape[0], 2), -8.0)  # sigmoid(-8) = 3e-4: below min_score
    for n, anchor, box, logit in people:
        enc[n, anchor] = encode_boxes(torch.tensor([box]), anchors[anchor:anchor + 1])[0]
        logits[n, anchor, 1] = logit
    return enc, logits


def test_tiled_targets_merge_the_views_and_the_tiles_boxes():
    t_spec = teacher_spec()
    s_spec = student_spec(t_spec, ((12, 12), (6, 6), (3, 3), (2, 2), (1, 1), (1, 1)), 192)
    anchors = anchors_tensor(t_spec)
    targets = CrossGridTargets(t_spec, s_spec, CrossGridConfig(tile_grid=2, tile_side=0.6))
    big = [0.10, 0.10, 0.50, 0.25]  # seen by the whole view (score 0.88) and, in tile 0's coordinates, by tile 0
    in_tile0 = [b / 0.6 for b in big]
    small_in_tile3 = [0.50, 0.50, 0.70, 0.60]  # missed by the whole view: in the view at 0.4 + 0.6 * b
    cut_in_tile1 = [0.20, 0.0, 0.60, 0.10]  # touches tile 1's left edge, which lies inside the view
    view_enc, view_logits = _outputs(anchors, [(0, 1000, big, 2.0)], 1)
    tile_enc, tile_logits = _outputs(anchors, [(0, 1000, in_tile0, 1.0), (3, 1200, small_in_tile3, 0.5),
                                               (1, 1100, cut_in_tile1, 3.0)], 4)
    boxes, scores, valid = targets.tiled_teacher_boxes(view_enc, view_logits, tile_enc, tile_logits,
                                                       torch.tensor([False]))
    kept = boxes[0, valid[0]]
    np.testing.assert_allclose(scores[0, valid[0]].numpy(), torch.sigmoid(torch.tensor([2.0, 0.5])).numpy(),
                               rtol=1e-5)
    np.testing.assert_allclose(kept[0].numpy(), big, atol=1e-5)  # the duplicate from tile 0 merged away
    np.testing.assert_allclose(kept[1].numpy(), [0.4 + 0.6 * b for b in small_in_tile3], atol=1e-5)
    # the targets carry both people (and a plain call, without tiles, only the view's one)
    tiled = targets(view_enc, view_logits, (tile_enc, tile_logits, torch.tensor([False])))
    plain = targets(view_enc, view_logits)
    q_tiled, q_plain = tiled[0, :, 1], plain[0, :, 1]
    assert bool(torch.isclose(q_tiled, torch.sigmoid(torch.tensor(0.5))).any())
    assert not bool(torch.isclose(q_plain, torch.sigmoid(torch.tensor(0.5))).any())
    with pytest.raises(CompressError, match="tiles"):
        targets(view_enc, view_logits, (tile_enc[:3], tile_logits[:3], torch.tensor([False])))
    with pytest.raises(CompressError, match="tile_grid"):
        CrossGridTargets(t_spec, s_spec, CrossGridConfig())(view_enc, view_logits,
                                                            (tile_enc, tile_logits, torch.tensor([False])))
