"""Cross-grid distillation targets: box coder round trip, IoU, Fast NMS, SSD matching rules, targets, student spec."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from jetforge.compress.distill.detection_crossgrid import (CrossGridConfig, CrossGridTargets,  # noqa: E402
                                                           anchors_tensor, box_iou, decode_boxes, encode_boxes,
                                                           fast_nms, match_anchors, student_spec)
from jetforge.compress.models.ssdlite_mobilenet_v2 import SSDLiteMobileNetV2  # noqa: E402
from jetforge.errors import CompressError  # noqa: E402
from jetforge.vision.ssd import SSDSpec, decode_boxes as numpy_decode, ssd_anchor_layers  # noqa: E402

TEACHER_GRIDS = ((19, 19), (10, 10), (5, 5), (3, 3), (2, 2), (1, 1))  # the port at 300 px


def teacher_spec() -> SSDSpec:
    return SSDSpec(layers=tuple(ssd_anchor_layers(TEACHER_GRIDS)))


def random_boxes(gen: torch.Generator, n: int) -> torch.Tensor:
    centre = torch.rand(n, 2, generator=gen)
    size = 0.02 + 0.6 * torch.rand(n, 2, generator=gen)
    return torch.cat([centre - size / 2, centre + size / 2], dim=1)


def test_student_spec_lays_the_teachers_boxes_on_the_students_grid():
    model = SSDLiteMobileNetV2(image_size=192)  # random weights: only its feature-map sizes are used
    spec = student_spec(teacher_spec(), model.grid_sizes, 192)
    assert [(l.rows, l.cols) for l in spec.layers] == [(12, 12), (6, 6), (3, 3), (2, 2), (1, 1), (1, 1)]
    assert spec.num_anchors == model.num_anchors == 12 * 12 * 3 + (36 + 9 + 4 + 1 + 1) * 6
    assert spec.image_size == (192, 192)
    assert [l.scales for l in spec.layers] == [l.scales for l in teacher_spec().layers]
    # the last map is 1x1 at both sizes: the same boxes (anchors are in normalised coordinates)
    np.testing.assert_array_equal(spec.anchors()[-6:], teacher_spec().anchors()[-6:])
    with pytest.raises(CompressError, match="6"):
        student_spec(teacher_spec(), model.grid_sizes[:5], 192)


def test_encoding_on_anchors_and_decoding_back_gives_the_box_and_decoding_matches_the_host_decoder():
    gen = torch.Generator().manual_seed(0)
    anchors = anchors_tensor(student_spec(teacher_spec(), ((12, 12), (6, 6), (3, 3), (2, 2), (1, 1), (1, 1)), 192))
    boxes = random_boxes(gen, anchors.shape[0]).double()
    enc = encode_boxes(boxes, anchors.double())
    # float64 round trip: the only error is eps = 1e-8 added to sizes (relative 1e-8 / 0.02 on the smallest box)
    np.testing.assert_allclose(decode_boxes(enc, anchors.double()).numpy(), boxes.numpy(), atol=1e-6)
    # an independent reference for the decoding: the host's numpy decoder (float32; 1e-5 is a few float32 ulps
    # of the coordinates after exp and the products)
    enc32 = enc.float()
    np.testing.assert_allclose(decode_boxes(enc32, anchors).numpy(), numpy_decode(enc32.numpy(), anchors.numpy()),
                               atol=1e-5)
    # an anchor encodes as zeros on itself
    np.testing.assert_allclose(encode_boxes(anchors, anchors).numpy(), 0.0, atol=1e-5)


def test_box_iou_against_hand_computed_values():
    a = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0]])
    b = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.25, 0.25, 0.75, 0.75], [0.5, 0.5, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    iou = box_iou(a, b).numpy()
    # overlap 0.25^2 over union 2 * 0.25 - 0.0625; touching corners 0; empty boxes 0 (not NaN)
    np.testing.assert_allclose(iou[0], [1.0, 0.0625 / 0.4375, 0.0, 0.0], atol=1e-7)
    np.testing.assert_array_equal(iou[1], [0.0, 0.0, 0.0, 0.0])


def test_fast_nms_keeps_the_best_of_overlapping_boxes_drops_low_scores_and_pads():
    boxes = torch.tensor([[[0.0, 0.0, 0.4, 0.2], [0.01, 0.0, 0.41, 0.2], [0.5, 0.5, 0.9, 0.7],
                           [0.0, 0.6, 0.3, 0.8], [0.2, 0.2, 0.3, 0.3]]])
    scores = torch.tensor([[0.6, 0.9, 0.3, 0.005, 0.3]])
    out_boxes, out_scores, valid = fast_nms(boxes, scores, iou_threshold=0.6, min_score=0.01, max_boxes=4)
    # box 0 overlaps box 1 (IoU 0.95) and scores lower: dropped; box 3 is under min_score; the two 0.3 boxes
    # keep anchor order; one padding row
    np.testing.assert_allclose(out_scores[0].numpy(), [0.9, 0.3, 0.3, 0.0])
    np.testing.assert_array_equal(valid[0].numpy(), [True, True, True, False])
    np.testing.assert_array_equal(out_boxes[0, :3].numpy(), boxes[0, [1, 2, 4]].numpy())
    np.testing.assert_array_equal(out_boxes[0, 3].numpy(), [0.0, 0.0, 0.0, 0.0])


def test_matching_rules_threshold_forced_best_anchor_and_conflicts():
    anchors = torch.tensor([[0.0, 0.0, 0.2, 0.2], [0.0, 0.2, 0.2, 0.4], [0.5, 0.5, 0.7, 0.7], [0.8, 0.8, 1.0, 1.0],
                            [0.6, 0.6, 0.8, 0.8]])
    boxes = torch.tensor([[[0.0, 0.0, 0.2, 0.25],  # IoU 0.8 with anchor 0 (>= 0.5: matched), 0.11 with anchor 1
                           [0.55, 0.55, 0.65, 0.65],  # best IoU 0.25 (anchor 2): below 0.5, forced there
                           [0.56, 0.56, 0.66, 0.66],  # best anchor also 2 (0.25): box 1 is first, so this one
                           #                            takes its best free anchor, 4 (IoU 0.078)
                           [0.8, 0.8, 1.0, 1.0]]])  # IoU 1 with anchor 3, but not a valid box
    valid = torch.tensor([[True, True, True, False]])
    iou = box_iou(anchors, boxes[0]).numpy()
    np.testing.assert_allclose([iou[0, 0], iou[2, 1], iou[2, 2], iou[4, 2]], [0.8, 0.25, 0.25, 0.0036 / 0.0464],
                               rtol=1e-5)
    assert iou[1, 0] < 0.5 and iou[4, 1] < iou[2, 1]
    assert match_anchors(boxes, valid, anchors, iou_match=0.5).tolist() == [[0, -1, 1, -1, 2]]
    # with box 1 invalid, box 2 gets anchor 2; with a single round, the conflict's loser stays unmatched
    assert match_anchors(boxes, torch.tensor([[True, False, True, False]]), anchors).tolist() == [[0, -1, 2, -1, -1]]
    assert match_anchors(boxes, valid, anchors, rounds=1).tolist() == [[0, -1, 1, -1, -1]]
    # a lower threshold matches anchor 1 to box 0 (IoU 0.125); a fifth box whose best anchor it is takes it over
    extra = torch.cat([boxes, torch.tensor([[[0.0, 0.25, 0.15, 0.4]]])], dim=1)
    assert match_anchors(boxes, valid, anchors, iou_match=0.1).tolist() == [[0, 0, 1, -1, 2]]
    assert match_anchors(extra, torch.tensor([[True, True, True, False, True]]), anchors,
                         iou_match=0.1).tolist() == [[0, 4, 1, -1, 2]]
    # no boxes at all: nothing matched
    assert match_anchors(boxes[:, :0], valid[:, :0], anchors).tolist() == [[-1, -1, -1, -1, -1]]


def test_targets_reencode_the_teachers_boxes_on_the_students_anchors():
    t_spec = teacher_spec()
    s_spec = student_spec(t_spec, ((12, 12), (6, 6), (3, 3), (2, 2), (1, 1), (1, 1)), 192)
    t_anchors, s_anchors = anchors_tensor(t_spec), anchors_tensor(s_spec)
    # a teacher that sees two people: anchors 1000 and 1500 (10x10 and 5x5 maps) decode to these boxes
    people = torch.tensor([[0.30, 0.40, 0.70, 0.55], [0.10, 0.05, 0.45, 0.30]])
    enc = torch.zeros(1, t_anchors.shape[0], 4)
    logits = torch.full((1, t_anchors.shape[0], 2), -8.0)  # sigmoid(-8) = 3e-4: below min_score
    for anchor, box, logit in ((1000, people[0], 2.0), (1500, people[1], -1.0)):
        enc[0, anchor] = encode_boxes(box[None], t_anchors[anchor:anchor + 1])[0]
        logits[0, anchor, 1] = logit
    targets = CrossGridTargets(t_spec, s_spec, CrossGridConfig())(enc, logits)
    assert targets.shape == (1, s_spec.num_anchors, 8)
    q = targets[0, :, 1]
    matched = q > 0
    assert matched.sum() >= 2
    expected = torch.sigmoid(torch.tensor([2.0, -1.0]))  # the low-score person stays as a soft target
    decoded = decode_boxes(targets[0, :, 3:7], s_anchors)
    iou_student = box_iou(s_anchors, people)
    for k in range(2):
        mine = matched & torch.isclose(q, expected[k])
        assert mine.any(), "person %d lost" % k
        np.testing.assert_allclose(decoded[mine].numpy(), people[k].expand(int(mine.sum()), 4).numpy(), atol=1e-5)
        # its anchors: the best one for the box, and any other at IoU >= 0.5
        assert int(iou_student[:, k].argmax()) in set(torch.nonzero(mine).flatten().tolist())
        assert bool((iou_student[mine & (iou_student[:, k] < iou_student[:, k].max()), k] >= 0.5).all())
    np.testing.assert_allclose(targets[0, :, 0].numpy(), 1.0 - q.numpy(), atol=1e-7)  # background column
    np.testing.assert_array_equal(targets[0, :, 2].numpy(), 1.0)  # every anchor's class term counts
    np.testing.assert_array_equal(targets[0, :, 7].numpy(), q.numpy())  # box weight = the teacher's score
    np.testing.assert_array_equal(targets[0, ~matched, 3:7].numpy(), 0.0)
    with pytest.raises(CompressError, match="anchors"):
        CrossGridTargets(t_spec, s_spec, CrossGridConfig())(enc[:, :100], logits[:, :100])


def test_cross_grid_config_refuses_bad_values():
    with pytest.raises(ValueError, match="min_score"):
        CrossGridConfig(min_score=1.5)
    with pytest.raises(ValueError, match="pre_nms"):
        CrossGridConfig(max_boxes=300, pre_nms=200)
