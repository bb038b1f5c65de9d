"""Each output decoder against an independent reference decoder written here from the layout's published description.

The references share nothing with jetforge.vision: their own IoU, their own greedy NMS loop, their own letterbox
inverse (written the way YOLO's own postprocess describes it: ``gain = min(640 / h, 640 / w)``,
``pad = (640 - side * gain) / 2`` at whole pixels, ``(x - pad) / gain``, clipped to the frame).  The raw outputs are
synthetic but follow the published layouts exactly: YOLOv8's ONNX output ``(1, 84, 8400)`` (rows cx, cy, w, h then
80 class probabilities), YOLOv5's ``(1, 25200, 85)`` (cx, cy, w, h, objectness, 80 probabilities), TensorRT's
EfficientNMS_TRT outputs (num_detections [N, 1] int32, detection_boxes [N, M, 4], detection_scores [N, M],
detection_classes [N, M] int32) and torchvision's detection outputs (boxes [K, 4] xyxy, labels [K] int64,
scores [K]).  Clusters of overlapping boxes of one class and of two classes exercise class-aware NMS.

Tolerance: boxes agree to 1e-3 px (float32 arithmetic on coordinates below 2,000 px: ~1e-4 px rounding), scores
exactly (both sides take the same float32 products), classes exactly.
"""

import numpy as np
import pytest

from jetforge.errors import ModelError
from jetforge.runtime.inputs.image import Preprocess
from jetforge.vision.classes import coco80, coco91
from jetforge.vision.decode import DECODERS, decoder_for, matching_decoders

LETTERBOX = Preprocess(height=640, width=640, resize="letterbox", scale=1 / 255, mean=(0.0,), std=(1.0,))
SPECS_V8 = [{"name": "output0", "shape": [1, 84, 8400]}]
SPECS_V5 = [{"name": "output0", "shape": [1, 25200, 85]}]


def ref_iou(a, b):
    x1, y1 = max(a[0], b[0]), max(a[1], b[1])
    x2, y2 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def ref_nms(boxes, scores, classes, iou, max_det):
    """Greedy, best score first, a box removes later boxes of its own class overlapping it by more than ``iou``."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    keep = []
    for i in order:
        if all(classes[k] != classes[i] or ref_iou(boxes[k], boxes[i]) <= iou for k in keep):
            keep.append(i)
    return keep[:max_det]


def ref_unletterbox(boxes, frame_hw, size=640):
    h, w = frame_hw
    gain = min(size / h, size / w)
    pad_x, pad_y = (size - round(w * gain)) // 2, (size - round(h * gain)) // 2
    out = []
    for x1, y1, x2, y2 in boxes:
        b = [(x1 - pad_x) / gain, (y1 - pad_y) / gain, (x2 - pad_x) / gain, (y2 - pad_y) / gain]
        out.append([min(max(b[0], 0), w), min(max(b[1], 0), h), min(max(b[2], 0), w), min(max(b[3], 0), h)])
    return np.asarray(out, np.float64).reshape(-1, 4)


def ref_unstretch(boxes, frame_hw, input_hw):
    """A stretched input's boxes in frame pixels: each axis scaled by frame / input, clipped to the frame."""
    (h, w), (ih, iw) = frame_hw, input_hw
    out = [[min(max(x1 * w / iw, 0), w), min(max(y1 * h / ih, 0), h), min(max(x2 * w / iw, 0), w),
            min(max(y2 * h / ih, 0), h)] for x1, y1, x2, y2 in boxes]
    return np.asarray(out, np.float64).reshape(-1, 4)


def ref_yolo(rows, conf, iou, max_det, frame_hw, objectness, unmap=None):
    """rows: (A, 4 + [1] + C) cx, cy, w, h, [objectness], class probabilities, in input pixels.  ``unmap(boxes,
    frame_hw)`` takes them to the frame (default: the 640 letterbox's inverse)."""
    boxes, scores, classes = [], [], []
    for r in rows:
        probs = r[5:] * r[4] if objectness else r[4:]
        c = int(np.argmax(probs))
        if probs[c] > conf:
            cx, cy, w, h = (float(v) for v in r[:4])
            boxes.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
            scores.append(float(probs[c]))
            classes.append(c)
    keep = ref_nms(boxes, scores, classes, iou, max_det)
    unmap = unmap or ref_unletterbox
    return unmap([boxes[k] for k in keep], frame_hw), [scores[k] for k in keep], [classes[k] for k in keep]


def synthetic_rows(rng, count, classes, objectness):
    """Candidate rows in a 640 letterboxed input: background noise below any threshold, plus clusters of
    overlapping boxes (same class, and a second class on the same spot) well above it."""
    width = 4 + int(objectness) + classes
    rows = np.zeros((count, width), np.float32)
    rows[:, 0:2] = rng.uniform(0, 640, (count, 2))
    rows[:, 2:4] = rng.uniform(4, 200, (count, 2))
    rows[:, 4:] = rng.uniform(0, 0.05, (count, width - 4))
    for k in range(12):
        centre, size = rng.uniform(100, 540, 2), rng.uniform(30, 150, 2)
        cls = int(rng.integers(0, classes))
        for j in range(5):
            i = int(rng.integers(0, count))
            rows[i, 0:2] = centre + rng.normal(0, 6, 2)
            rows[i, 2:4] = size * rng.uniform(0.85, 1.15, 2)
            c = cls if j < 4 else (cls + 1) % classes
            rows[i, 4 + int(objectness) + c] = rng.uniform(0.3, 0.98)
            if objectness:
                rows[i, 4] = rng.uniform(0.5, 1.0)
    return rows


def assert_same(dets, ref):
    boxes, scores, classes = ref
    assert len(dets) == len(scores) > 0
    np.testing.assert_allclose(dets.boxes, boxes, atol=1e-3)
    np.testing.assert_array_equal(dets.scores, np.asarray(scores, np.float32))
    np.testing.assert_array_equal(dets.classes, classes)


@pytest.mark.parametrize("frame_hw", [(720, 1280), (375, 500), (480, 480)])
def test_yolov8_layout_against_the_reference(frame_hw):
    rng = np.random.default_rng(8)
    rows = synthetic_rows(rng, 8400, 80, objectness=False)
    output = rows.T[None].copy()  # (1, 84, 8400)
    decoder = decoder_for(name="yolov8", labels=coco80(), output_specs=SPECS_V8, input_hw=(640, 640))
    dets = decoder.decode_frames([output], LETTERBOX, [frame_hw])[0]
    assert_same(dets, ref_yolo(rows, 0.25, 0.45, 300, frame_hw, objectness=False))
    assert dets.labels[0] == "person"


def test_yolov8_decoder_on_a_real_yolov8_layout_model_against_the_reference():
    """The shipped ``yolov8-person-192`` (a real YOLOv8-layout ONNX, distilled from the SSD port: its card) on 6
    frames of vtest.avi: its raw ``[1, 5, 756]`` outputs decoded by the registered decoder equal the reference's,
    with the sidecar's own options (score > 0.25, per-class NMS at IoU 0.5, 300 at most) and its stretched input."""
    cv2 = pytest.importorskip("cv2")
    ort = pytest.importorskip("onnxruntime")
    from jetforge.assets import asset_path
    from jetforge.runtime.model_facts import model_facts
    from jetforge.workflow.shipped_models import shipped_model

    model = shipped_model("yolov8-person-192")
    facts = model_facts(model.onnx)
    decoder = decoder_for(facts)
    options = facts.extra["decoder"]["options"]
    assert decoder.name == "yolov8" and facts.input.resize == "stretch"
    session = ort.InferenceSession(str(model.onnx), providers=["CPUExecutionProvider"])
    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    found = 0
    for _ in range(6):
        ok, frame = cap.read()
        assert ok
        (output,) = session.run(None, {"images": facts.input.apply(frame)[None]})
        assert output.shape == (1, 5, 756)
        dets = decoder.decode_frames([output], facts.input, [frame.shape[:2]])[0]
        ref = ref_yolo(output[0].T, options["score_threshold"], options["iou_threshold"], options["max_detections"],
                       frame.shape[:2], objectness=False,
                       unmap=lambda b, hw: ref_unstretch(b, hw, (facts.input.height, facts.input.width)))
        assert_same(dets, ref)
        found += len(dets)
    cap.release()
    assert found >= 12  # vtest's walkers are found: the comparison is not of empty frames


def test_yolov5_layout_against_the_reference():
    rng = np.random.default_rng(5)
    rows = synthetic_rows(rng, 25200, 80, objectness=True)
    decoder = decoder_for(name="yolov5", labels=coco80(), output_specs=SPECS_V5, input_hw=(640, 640))
    dets = decoder.decode_frames([rows[None]], LETTERBOX, [(720, 1280)])[0]
    assert_same(dets, ref_yolo(rows, 0.25, 0.45, 300, (720, 1280), objectness=True))


def test_class_agnostic_option_suppresses_across_classes():
    rng = np.random.default_rng(9)
    rows = synthetic_rows(rng, 8400, 80, objectness=False)
    from jetforge.vision.decode import DecoderOptions

    aware = decoder_for(name="yolov8", labels=coco80(), output_specs=SPECS_V8)
    agnostic = decoder_for(name="yolov8", labels=coco80(), output_specs=SPECS_V8,
                           options=DecoderOptions(class_agnostic=True))
    a = aware.decode_frames([rows.T[None]], LETTERBOX, [(640, 640)])[0]
    b = agnostic.decode_frames([rows.T[None]], LETTERBOX, [(640, 640)])[0]
    # the synthetic clusters put a second class on each spot: aware NMS keeps both, agnostic only the better one
    assert len(b) < len(a)
    ref_boxes, ref_scores, _ = ref_yolo(rows, 0.25, 0.45, 300, (640, 640), objectness=False)
    kept = ref_nms(list(ref_boxes), ref_scores, [0] * len(ref_scores), 0.45, 300)
    np.testing.assert_allclose(b.boxes, ref_boxes[kept], atol=1e-3)


@pytest.mark.parametrize("box_format", ["xyxy", "yxyx", "cxcywh"])
@pytest.mark.parametrize("normalized", [False, True])
def test_efficientnms_outputs_against_the_reference(box_format, normalized):
    rng = np.random.default_rng(3)
    batch, max_out = 2, 100
    corner = rng.uniform(0, 560, (batch, max_out, 2))
    xyxy = np.concatenate([corner, corner + rng.uniform(1, 80, (batch, max_out, 2))], axis=-1)
    scores = np.sort(rng.uniform(0.3, 1.0, (batch, max_out)).astype(np.float32), axis=1)[:, ::-1].copy()
    classes = rng.integers(0, 80, (batch, max_out)).astype(np.int32)
    num = np.array([[37], [0]], np.int32)
    scores[0, 37:] = 0
    coded = {"xyxy": xyxy, "yxyx": xyxy[..., [1, 0, 3, 2]],
             "cxcywh": np.concatenate([(xyxy[..., :2] + xyxy[..., 2:]) / 2, xyxy[..., 2:] - xyxy[..., :2]], -1)}
    boxes = coded[box_format] / (640.0 if normalized else 1.0)
    specs = [{"name": n, "shape": s} for n, s in (("num_detections", [2, 1]), ("detection_boxes", [2, 100, 4]),
                                                   ("detection_scores", [2, 100]), ("detection_classes", [2, 100]))]
    block = {"box_format": box_format, "normalized": normalized}
    from jetforge.vision.decode.nms_outputs import EfficientNmsParams

    decoder = DECODERS.get("efficientnms")(coco80(), None, EfficientNmsParams(**block),
                                           [s["name"] for s in specs], (640, 640))
    frames = [(720, 1280), (720, 1280)]
    dets = decoder.decode_frames([num, boxes.astype(np.float32), scores, classes], LETTERBOX, frames)
    keep = scores[0, :37] > 0.25
    ref = ref_unletterbox(xyxy[0, :37][keep], frames[0])
    area = (ref[:, 2] > ref[:, 0]) & (ref[:, 3] > ref[:, 1])
    np.testing.assert_allclose(dets[0].boxes, ref[area], atol=1e-3)
    np.testing.assert_array_equal(dets[0].classes, classes[0, :37][keep][area])
    assert len(dets[1]) == 0


def test_torchvision_outputs_in_any_order():
    rng = np.random.default_rng(4)
    corner = rng.uniform(0, 250, (20, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(5, 70, (20, 2))], axis=1).astype(np.float32)
    scores = np.sort(rng.uniform(0, 1, 20).astype(np.float32))[::-1].copy()
    labels = rng.integers(1, 91, 20).astype(np.int64)
    stretch = Preprocess(height=320, width=320, resize="stretch")
    specs = [{"name": "boxes", "shape": [20, 4]}, {"name": "labels", "shape": [20]}, {"name": "scores", "shape": [20]}]
    decoder = decoder_for(name="torchvision", labels=coco91(), output_specs=specs)
    a = decoder.decode_frames([boxes, labels, scores], stretch, [(480, 640)])[0]
    b = decoder.decode_frames([scores, boxes, labels], stretch, [(480, 640)])[0]
    keep = scores > 0.25
    ref = boxes[keep].astype(np.float64) * np.array([640 / 320, 480 / 320] * 2)
    np.testing.assert_allclose(a.boxes, ref, atol=1e-3)
    np.testing.assert_array_equal(a.classes, labels[keep])
    np.testing.assert_array_equal(a.boxes, b.boxes)
    assert a.labels[int(a.classes[0])] == coco91()[int(labels[keep][0])]


def test_layouts_are_told_apart_by_shape():
    assert matching_decoders([[1, 84, 8400]], 80) == ["yolov8"]
    assert matching_decoders([[1, 25200, 85]], 80) == ["yolov5"]
    assert "efficientnms" in matching_decoders([[1, 1], [1, 100, 4], [1, 100], [1, 100]])
    assert matching_decoders([[1, 7]]) == []


def test_outputs_that_fit_no_decoder_are_one_line_naming_the_fix():
    with pytest.raises(ModelError, match=r"do not fit decoder yolov5.*") as err:
        decoder_for(name="yolov5", labels=coco80(), output_specs=SPECS_V8)
    assert "--decoder yolov8" in str(err.value.hint)
    with pytest.raises(ModelError, match="names no output decoder") as err:
        decoder_for(labels=coco80(), output_specs=SPECS_V8)
    assert "export-sidecar" in str(err.value.hint) and "yolov8" in str(err.value.hint)
    with pytest.raises(ModelError, match="fit no registered decoder|do not fit"):
        decoder_for(name="yolov8", output_specs=[{"name": "x", "shape": [1, 1000]}])


def test_a_class_count_that_disagrees_with_the_labels_is_refused():
    with pytest.raises(ModelError, match="not 4 \\+ 3 classes"):
        decoder_for(name="yolov8", labels=("a", "b", "c"), output_specs=SPECS_V8)
    decoder = decoder_for(name="yolov8", labels=("a", "b", "c"), output_specs=[{"name": "o", "shape": [1, "c", "n"]}])
    with pytest.raises(ModelError, match="outputs 80 classes but its label list names 3"):
        decoder.decode_frames([np.zeros((1, 84, 8400), np.float32)], LETTERBOX, [(640, 640)])


@pytest.mark.parametrize("bad, message", [(np.nan, "NaN or infinite"), (-2.5, "negative scores")])
def test_nan_or_negative_scores_are_refused(bad, message):
    rows = np.zeros((8400, 84), np.float32)
    rows[:, 2:4] = 10
    rows[17, 40] = bad
    decoder = decoder_for(name="yolov8", labels=coco80(), output_specs=SPECS_V8)
    with pytest.raises(ModelError, match=message):
        decoder.decode_frames([rows.T[None]], LETTERBOX, [(640, 640)])


def test_ssd_tf_decoder_is_the_shipped_detectors_decoder():
    """The registered ssd-tf decoder gives what jetforge.vision.ssd's postprocess + to_detections give."""
    from jetforge.runtime.model_facts import model_facts
    from jetforge.vision import ssd
    from jetforge.workflow.shipped_models import shipped_model

    facts = model_facts(shipped_model("ssdlite-person-192").onnx)
    spec = ssd.spec_from_sidecar(facts)
    rng = np.random.default_rng(1)
    enc = rng.normal(0, 1, (2, spec.num_anchors, 4)).astype(np.float32)
    logits = rng.normal(-3, 2, (2, spec.num_anchors, 2)).astype(np.float32)
    decoder = decoder_for(facts)
    assert decoder.name == "ssd-tf"
    frames = [(576, 768), (272, 640)]
    got = decoder.decode_frames([enc, logits], facts.input, frames)
    want = ssd.postprocess(enc, logits, spec, score_threshold=0.25)
    for g, w, hw in zip(got, want, frames):
        d = w.to_detections(facts.input.geometry(hw), (facts.input.height, facts.input.width))
        assert len(d) > 0
        np.testing.assert_allclose(g.boxes, d.boxes, atol=1e-3)
        np.testing.assert_array_equal(g.scores, d.scores)
