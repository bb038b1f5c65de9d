"""A sharper teacher for small people: the same teacher run on the whole view and on zoomed, overlapping tiles of it.

Why: a student at a smaller input (192 px) loses AP on the small people (20-30 px tall at its input), and a
student distilled from the teacher's boxes can at best learn the boxes the teacher finds -- and the teacher
itself, at 300 px, misses many small people.  Cut a view into a ``grid x grid`` set of overlapping tiles
(each ``side`` of the view's side), let the teacher score each tile at its full input size (so a person is
``1 / side`` times larger than in the whole view) as well as the whole view, and merge the boxes: the
teacher's own weights, run as slicing-aided inference (SAHI-style) would run them, find people the single
pass misses.  The merged boxes are the cross-grid targets
(:class:`jetforge.compress.distill.detection_crossgrid.CrossGridTargets`), so the student learns in one
pass at 192 px what the teacher sees in five at 300 px.

The tile layout and the pixel cut are :func:`jetforge.vision.tiles.tile_rects` and
:func:`~jetforge.vision.tiles.cut_tile`.  Merging, in the view's normalised ``[ymin, xmin, ymax, xmax]``, batched in
torch (the rules of :func:`jetforge.vision.tiles.merge_tiled`, the apps' numpy merge, whose cut rule
:func:`~jetforge.vision.tiles.cut_by_inner_edge` runs here on tensors; here Fast NMS, as for the plain targets):

- each input (view, tiles) goes through the teacher's decoding and its NMS first (its usual output);
- a tile box touching one of the tile's **inner** edges (an edge that is not the view's edge; within
  ``edge`` of it, in the tile's normalised units) is dropped: it is a person cut by the tile, and because
  tiles overlap by more than a person is wide, the neighbouring tile or the whole view sees that person
  whole;
- tile boxes are mapped into the view (a mirrored view mirrors its tiles: :func:`tiles_in_view`), and all
  boxes of a view go through one more NMS at ``merge_iou``.
"""

from typing import Tuple

import torch

from jetforge.vision.tiles import cut_by_inner_edge


def tiles_in_view(rects: torch.Tensor, flipped: torch.Tensor) -> torch.Tensor:
    """``(T, 4)`` tiles of an unmirrored view -> ``(N, T, 4)`` where each of the N views shows them.

    A mirrored view (``flipped[n]``) shows the tile cut at ``[x0, x1]`` at ``[1 - x1, 1 - x0]``, mirrored too,
    which is exactly how :meth:`jetforge.compress.distill.detection_train.FrameBank.sample_tiled` cuts it.
    """
    n = flipped.shape[0]
    r = rects.to(torch.float32).unsqueeze(0).expand(n, -1, -1)
    mirror = torch.stack([r[..., 0], 1.0 - r[..., 3], r[..., 2], 1.0 - r[..., 1]], dim=-1)
    return torch.where(flipped.view(n, 1, 1), mirror, r)


def tile_boxes_in_view(boxes: torch.Tensor, valid: torch.Tensor, where: torch.Tensor,
                       edge: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Tile boxes ``(N, T, K, 4)`` (normalised to each tile) -> view boxes ``(N, T, K, 4)`` and their validity.

    ``where`` ``(N, T, 4)`` is each tile's place in its view (:func:`tiles_in_view`); a box within ``edge`` of
    one of its tile's inner edges becomes invalid (module docstring).
    """
    y0, x0, y1, x1 = (where[..., i].unsqueeze(-1) for i in range(4))  # (N, T, 1) each
    # the apps' rule (jetforge.vision.tiles.cut_by_inner_edge), in the tile's normalised units (a tile is 1 wide)
    cut = cut_by_inner_edge(boxes[..., 1], boxes[..., 0], boxes[..., 3], boxes[..., 2],
                            (x0 > 0, y0 > 0, x1 < 1, y1 < 1), (1.0, 1.0), edge)
    h, w = y1 - y0, x1 - x0
    mapped = torch.stack([y0 + boxes[..., 0] * h, x0 + boxes[..., 1] * w,
                          y0 + boxes[..., 2] * h, x0 + boxes[..., 3] * w], dim=-1)
    return mapped, valid & ~cut


__all__ = ["tile_boxes_in_view", "tiles_in_view"]
