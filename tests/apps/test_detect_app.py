"""`jetforge app detect`: any detector ONNX, tracked and counted per class, on real components.

Three real models:

* a YOLOv8-layout ONNX made here with ``onnx.helper`` whose output is a known function of its input: candidate 0 is
  a ``person`` box whose centre x is the mean red level of the frame (``R / 255 * 96``), candidate 1 a ``car`` box
  whose centre x is the mean green level; on a lossless (FFV1) clip of flat-coloured 96x96 frames the person walks
  left to right and the car drives right to left across a vertical line, so every detection, track class, count and
  crossing is known in advance;
* the shipped SSD person detector (``ssdlite-person-192``, decoder ``ssd-tf``) on vtest.avi, whose tracks and counts
  in ``app detect`` must be the people app's own (one implementation of tracking and counting);
* the shipped YOLOv8-layout person detector (``yolov8-person-192``, decoder ``yolov8``; distilled from the SSD port
  by ``recipes/distill_yolov8_person.yaml``), a real model of that layout: its detections on vtest.avi must be the
  independent reference decoder's (tests/vision/test_output_decoders.py) on its raw outputs.
"""

import json

import numpy as np
import pytest

from jetforge.cli.main import main

cv2 = pytest.importorskip("cv2")
onnx = pytest.importorskip("onnx")

SIDE = 96  # frame = model input: the letterbox is the identity, boxes come back unchanged
FRAMES = 30
CANDIDATES = 8  # the layout has more candidates than numbers per candidate (4 + 2); two of them are objects
PERSON = dict(cy=40.0, w=16.0, h=32.0, score=0.9)  # candidate 0, class 0
CAR = dict(cy=70.0, w=24.0, h=16.0, score=0.8)  # candidate 1, class 1
LINE = "mid=48,0,48,96"  # drawn downwards: left to right is "backward", right to left "forward"
ZONE = "left=0,0,48,0,48,96,0,96"


def red(k):
    return 10 + 6 * k  # person: cx from 3.8 to 69.2 px


def green(k):
    return 200 - 6 * k  # car: cx from 75.3 to 9.8 px


def make_fixture_onnx(path):
    """[N, 3, 96, 96] RGB in [0, 1] -> [N, 4 + 2, 8]: column 0 the person, column 1 the car (module docstring)."""
    from onnx import TensorProto, helper, numpy_helper

    def const(name, array):
        return numpy_helper.from_array(np.asarray(array, np.float32), name)

    e0 = np.zeros((1, 6, CANDIDATES), np.float32)
    e0[0, 0, 0] = 1.0
    e1 = np.zeros((1, 6, CANDIDATES), np.float32)
    e1[0, 0, 1] = 1.0
    base = np.zeros((1, 6, CANDIDATES), np.float32)  # candidates 2.. score 0: never detections
    base[0, 1:4, 0] = (PERSON["cy"], PERSON["w"], PERSON["h"])
    base[0, 4, 0] = PERSON["score"]
    base[0, 1:4, 1] = (CAR["cy"], CAR["w"], CAR["h"])
    base[0, 5, 1] = CAR["score"]
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], axes=[2, 3], keepdims=0),  # [N, 3]
        helper.make_node("Mul", ["mean", "side"], ["centres"]),  # [N, 3] in pixels
        helper.make_node("Slice", ["centres", "s0", "s1", "axis1"], ["cx_person"]),  # [N, 1]: red
        helper.make_node("Slice", ["centres", "s1", "s2", "axis1"], ["cx_car"]),  # [N, 1]: green
        helper.make_node("Unsqueeze", ["cx_person", "axis2"], ["p3"]),  # [N, 1, 1]
        helper.make_node("Unsqueeze", ["cx_car", "axis2"], ["c3"]),
        helper.make_node("Mul", ["p3", "e0"], ["p_part"]),
        helper.make_node("Mul", ["c3", "e1"], ["c_part"]),
        helper.make_node("Add", ["p_part", "c_part"], ["moving"]),
        helper.make_node("Add", ["moving", "base"], ["output0"]),
    ]
    ints = [numpy_helper.from_array(np.asarray(v, np.int64), n) for n, v in
            (("s0", [0]), ("s1", [1]), ("s2", [2]), ("axis1", [1]), ("axis2", [2]))]
    graph = helper.make_graph(
        nodes, "yolov8_fixture",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 6, CANDIDATES])],
        initializer=[const("side", [float(SIDE)]), const("e0", e0), const("e1", e1), const("base", base)] + ints)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def fixture_model(tmp_path_factory):
    """The fixture ONNX with its sidecar (export-sidecar: decoder yolov8, classes person,car, YOLO's input)."""
    folder = tmp_path_factory.mktemp("det")
    path = make_fixture_onnx(folder / "det.onnx")
    bare = make_fixture_onnx(folder / "bare.onnx")  # no sidecar
    assert main(["export-sidecar", str(path), "--decoder", "yolov8", "--classes", "person,car"]) == 0
    clip = folder / "walk.avi"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"FFV1"), 10, (SIDE, SIDE))
    assert writer.isOpened()
    for k in range(FRAMES):
        writer.write(np.full((SIDE, SIDE, 3), (0, green(k), red(k)), np.uint8))  # BGR
    writer.release()
    return path, bare, clip


def expected_box(level, cls):
    """The box the fixture gives for a colour level, in frame pixels, clipped to the frame (as every YOLO
    postprocess and the decoder do)."""
    cx = level / 255.0 * SIDE
    x1, x2 = max(0.0, cx - cls["w"] / 2), min(float(SIDE), cx + cls["w"] / 2)
    return [x1, cls["cy"] - cls["h"] / 2, x2, cls["cy"] + cls["h"] / 2]


def run_detect(out, model, clip, *extra):
    rc = main(["app", "detect", "--model", str(model), "--source", str(clip), "--out", str(out), "--line", LINE,
               "--zone", ZONE, "--no-video", "--no-plots", "-q"] + list(extra))
    assert rc == 0
    frames, crossings = read_events(out)
    return frames, crossings, json.loads((out / "metrics.json").read_text())


def read_events(out):
    """(per-frame records, line_cross records) of a run's events.jsonl."""
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    return [e for e in events if "tracks" in e], [e for e in events if e.get("type") == "line_cross"]


def test_detections_tracks_and_counts_per_class_are_the_known_ones(fixture_model, tmp_path):
    model, _, clip = fixture_model
    frames, crossings, metrics = run_detect(tmp_path / "both", model, clip)
    assert [e["frame"] for e in frames] == list(range(FRAMES))
    for k, e in enumerate(frames):
        want = {"person": expected_box(red(k), PERSON) + [PERSON["score"]],
                "car": expected_box(green(k), CAR) + [CAR["score"]]}
        got = {row[5]: row[:5] for row in e["detections"]}
        assert sorted(got) == ["car", "person"]
        for name in want:  # events round boxes to 0.1 px: within one rounding step of the float32 arithmetic
            assert np.abs(np.subtract(got[name], want[name])).max() <= 0.05 + 1e-4, (k, name, got[name])
        # min_hits 2: each class's track is confirmed on the second frame and keeps id 1 (ids per class)
        assert sorted((t["class"], t["id"]) for t in e["tracks"]) == ([] if k == 0 else [("car", 1), ("person", 1)])
        assert e["objects"] == {"person": int(k > 0), "car": int(k > 0)}
        # zone occupancy from the detection's foot point, away from the zone's edge where the Kalman box may lag
        for name, level, cls in (("person", red(k), PERSON), ("car", green(k), CAR)):
            cx = level / 255.0 * SIDE
            if k > 0 and abs(cx - 48.0) > 5.0:
                assert e["occupancy"]["left"][name] == int(cx < 48.0), (k, name)
    assert sorted((c["class"], c["direction"], c["track"]) for c in crossings) == [
        ("car", "forward", 1), ("person", "backward", 1)]
    for c in crossings:  # the frame the detection's foot is 10 px (the margin) past x = 48; the track may lag 2
        level = red if c["class"] == "person" else green
        first = next(k for k in range(FRAMES) if abs(level(k) / 255.0 * SIDE - 48.0) >= 10.0
                     and (level(k) / 255.0 * SIDE > 48.0) == (c["class"] == "person"))
        assert 0 <= c["frame"] - first <= 2, c
    assert frames[-1]["counts"] == {"mid": {"person": {"forward": 0, "backward": 1},
                                            "car": {"forward": 1, "backward": 0}}}
    results = metrics["results"]
    assert results["classes"] == "all" and metrics["model"]["detector"]["decoder"] == "yolov8"
    per_class = results["streams"][0]["classes"]
    assert per_class["person"]["tracks"] == per_class["car"]["tracks"] == 1


def test_classes_car_drops_persons_and_leaves_the_car_exactly_as_it_was(fixture_model, tmp_path):
    model, _, clip = fixture_model
    both, both_crossings, _ = run_detect(tmp_path / "both", model, clip)
    cars, car_crossings, metrics = run_detect(tmp_path / "car", model, clip, "--classes", "car")
    text = (tmp_path / "car" / "events.jsonl").read_text()
    assert "person" not in text
    for a, b in zip(both, cars):
        assert b["detections"] == [row for row in a["detections"] if row[5] == "car"]
        assert b["tracks"] == [t for t in a["tracks"] if t["class"] == "car"]  # its own tracker: same inputs
        assert b["counts"] == {"mid": {"car": a["counts"]["mid"]["car"]}}
    strip = lambda events: [{k: v for k, v in e.items() if k not in ("t", "latency_ms")} for e in events]  # noqa
    assert strip(car_crossings) == strip([c for c in both_crossings if c["class"] == "car"]) and car_crossings
    assert metrics["results"]["classes"] == ["car"]


def test_a_model_without_sidecar_runs_with_decoder_and_unnamed_classes(fixture_model, tmp_path):
    model, bare, clip = fixture_model
    named = run_detect(tmp_path / "named", model, clip)[0]
    unnamed = run_detect(tmp_path / "bare", bare, clip, "--decoder", "yolov8", "--classes", "class1")[0]
    rename = {"car": "class1"}
    for a, b in zip(named, unnamed):  # YOLO's input convention is what the sidecar says: the same boxes
        assert b["detections"] == [row[:5] + [rename[row[5]]] for row in a["detections"] if row[5] == "car"]
        assert [t["class"] for t in b["tracks"]] == ["class1"] * len(b["tracks"])


@pytest.mark.parametrize("argv, says", [
    (["--classes", "cat,car"], "--classes names cat, which det.onnx does not detect; its classes: person, car"),
    ([], "export-sidecar"),
])
def test_hostile_input_is_one_line_and_exit_1(fixture_model, tmp_path, capsys, argv, says):
    model, bare, clip = fixture_model
    chosen = model if argv else bare  # the second case: a model without a decoder and no --decoder
    rc = main(["app", "detect", "--model", str(chosen), "--source", str(clip), "--out", str(tmp_path / "o"),
               "--max-frames", "2", "--no-video", "--no-plots"] + argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and says in err[0], err
    assert "Traceback" not in err[0]


def test_shipped_person_detector_in_detect_tracks_and_counts_as_the_people_app(tmp_path):
    """`app detect --model ssdlite-person-192` (decoder ssd-tf, threshold 0.25 by default) against `app people` with
    the same model at the same threshold: the same detections, tracks, counts and crossings frame by frame."""
    from jetforge.workflow.shipped_models import shipped_model

    onnx_path = shipped_model("ssdlite-person-192").onnx
    common = ["--max-frames", "40", "--no-video", "--no-plots", "-q"]
    assert main(["app", "detect", "--model", "ssdlite-person-192", "--classes", "person", "--out",
                 str(tmp_path / "d")] + common) == 0
    assert main(["app", "people", "--detector-model", str(onnx_path), "--detector-threshold", "0.25", "--out",
                 str(tmp_path / "p")] + common) == 0
    (det, det_cross), (ppl, ppl_cross) = read_events(tmp_path / "d"), read_events(tmp_path / "p")
    assert len(det) == len(ppl) == 40
    assert sum(len(e["tracks"]) for e in ppl) > 40  # vtest has people in view: the comparison is not empty
    for d, p in zip(det, ppl):
        assert [row[:5] for row in d["detections"]] == p["detections"]
        assert {row[5] for row in d["detections"]} <= {"person"}
        assert [{k: v for k, v in t.items() if k != "class"} for t in d["tracks"]] == p["tracks"]
        assert d["objects"] == {"person": p["people"]}
        assert {n: c["person"] for n, c in d["counts"].items()} == p["counts"]
        assert {n: o["person"] for n, o in d["occupancy"].items()} == p["occupancy"]
    assert [{k: v for k, v in c.items() if k not in ("class", "latency_ms")} for c in det_cross] == \
        [{k: v for k, v in c.items() if k != "latency_ms"} for c in ppl_cross]


def test_shipped_yolov8_layout_detector_in_detect_gives_the_reference_decoders_boxes(tmp_path):
    """`app detect --model yolov8-person-192` on the first 8 frames of vtest.avi.  Each frame's detections equal the
    reference decoder's (its own argmax, threshold, greedy per-class NMS and stretch inverse: ref_yolo with
    ref_unstretch) on the model's raw output for that frame, run here through ONNX Runtime on an input made here
    with OpenCV from the sidecar's numbers (resize to 192x192 bilinear, BGR -> RGB, ``x * scale - mean``).
    Tolerance: the events round boxes to 0.1 px and scores to 0.001, so within half a step plus 1e-3 px and 1e-6."""
    import onnxruntime as ort

    from jetforge.assets import asset_path
    from jetforge.jsonfile import read_json
    from jetforge.workflow.shipped_models import shipped_model
    from tests.vision.test_output_decoders import ref_unstretch, ref_yolo

    model = shipped_model("yolov8-person-192")
    sidecar = read_json(model.file("sidecar"), "sidecar")
    size, pre, options = sidecar["input"]["height"], sidecar["input"], sidecar["extra"]["decoder"]["options"]
    assert sidecar["extra"]["decoder"]["name"] == "yolov8" and pre["resize"] == "stretch" and pre["color"] == "rgb"
    assert main(["app", "detect", "--model", "yolov8-person-192", "--max-frames", "8", "--no-video", "--no-plots",
                 "--out", str(tmp_path / "y"), "-q"]) == 0
    frames, _ = read_events(tmp_path / "y")
    assert [e["frame"] for e in frames] == list(range(8))
    session = ort.InferenceSession(str(model.onnx), providers=["CPUExecutionProvider"])
    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    compared = 0
    for event in frames:
        ok, frame = cap.read()
        assert ok
        rgb = cv2.cvtColor(cv2.resize(frame, (size, size), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
        x = (rgb.astype(np.float32) * np.float32(pre["scale"]) - np.float32(pre["mean"][0])) / np.float32(pre["std"][0])
        (output,) = session.run(None, {"images": x.transpose(2, 0, 1)[None]})
        boxes, scores, classes = ref_yolo(output[0].T, options["score_threshold"], options["iou_threshold"],
                                          options["max_detections"], frame.shape[:2], objectness=False,
                                          unmap=lambda b, hw: ref_unstretch(b, hw, (size, size)))
        got = event["detections"]  # in the decoder's order: best score first, as the reference keeps them
        assert [r[5] for r in got] == [sidecar["labels"][c] for c in classes]
        np.testing.assert_allclose([r[:4] for r in got], np.reshape(boxes, (-1, 4)), rtol=0, atol=0.05 + 1e-3)
        np.testing.assert_allclose([r[4] for r in got], scores, rtol=0, atol=0.0005 + 1e-6)
        compared += len(got)
    cap.release()
    assert compared >= 16  # vtest's walkers are found: not a comparison of empty frames


def test_photos_are_counted_per_class_without_tracks(fixture_model, tmp_path):
    model, _, _ = fixture_model
    folder = tmp_path / "photos"
    folder.mkdir()
    for k in (0, 10, 20):
        cv2.imwrite(str(folder / ("p%02d.png" % k)), np.full((SIDE, SIDE, 3), (0, green(k), red(k)), np.uint8))
    assert main(["app", "detect", "--model", str(model), "--source", str(folder), "--classes", "person", "--out",
                 str(tmp_path / "o"), "--no-video", "--no-plots", "-q"]) == 0
    frames, crossings = read_events(tmp_path / "o")
    assert len(frames) == 3 and not crossings
    for e, k in zip(frames, (0, 10, 20)):
        assert e["photo"] and e["tracks"] == [] and e["objects"] == {"person": 1}
        (found,) = e["boxes"]
        assert found["class"] == "person" and found["score"] == PERSON["score"]
        assert np.abs(np.subtract(found["box"], expected_box(red(k), PERSON))).max() <= 0.05 + 1e-4
    assert sorted(p.name for p in (tmp_path / "o" / "images").iterdir()) == ["p00.jpg", "p10.jpg", "p20.jpg"]


def test_gpu_path_decodes_batch_outputs_as_the_cpu_detector(fixture_model, tmp_path, monkeypatch):
    """`--decode gpu` over 2 streams (NVDEC replaced by its CPU stand-in, tests/standins/fake_nvdec.py): the batch's
    raw outputs decoded on the host by the same decoder equal the CPU detector's boxes on the same NV12-converted
    frames, within 0.5 px (the GPU path preprocesses with the fused OpenCV path, the detector with the reference
    path: a grey level's rounding moves the fixture's centre by 96/255 = 0.38 px, the events round to 0.05)."""
    from jetforge.apps.video.sources.gpu import nvdec, open as gpu
    from jetforge.apps.video.sources.gpu.frame import bgr_from_nv12
    from jetforge.apps.video.sources.gpu.nvdec import NvDecSource
    from jetforge.vision.decoded_detector import DecodedDetector
    from tests.standins.fake_nvdec import FakeNvDecoder

    monkeypatch.setattr(gpu, "choose_decoder", lambda wanted, have=None: "nvdec")
    monkeypatch.setattr(nvdec, "load_pynvvideocodec", lambda: FakeNvDecoder)
    model, _, clip = fixture_model
    out = tmp_path / "gpu"
    assert main(["app", "detect", "--decode", "gpu", "--model", str(model), "--source", str(clip), "--source",
                 str(clip), "--max-frames", "10", "--no-video", "--no-plots", "--out", str(out), "-q"]) == 0
    frames, _ = read_events(out)
    with NvDecSource(clip, codec_module=FakeNvDecoder, max_frames=10) as src, DecodedDetector(model) as det:
        want = [det(bgr_from_nv12(cv2, f.host_nv12())) for f in src]
    for s in range(2):
        mine = sorted((e for e in frames if e["stream"] == s), key=lambda e: e["frame"])
        assert [e["frame"] for e in mine] == list(range(10))
        for e, ref in zip(mine, want):
            got = sorted(e["detections"], key=lambda r: r[5])
            names = [ref.labels[int(c)] for c in ref.classes]
            ref_rows = sorted(([*map(float, b), float(sc), n] for b, sc, n in zip(ref.boxes, ref.scores, names)),
                              key=lambda r: r[5])
            assert [r[5] for r in got] == [r[5] for r in ref_rows] == ["car", "person"]
            assert np.abs(np.array([r[:5] for r in got]) - np.array([r[:5] for r in ref_rows])).max() <= 0.5
