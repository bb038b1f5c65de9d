"""``jetforge bench MODEL --accuracy LABELS``: accuracy of the timed session, checked against independent references.

* Detector: the shipped ssdlite-person-192 on 20 held-out frames of the person-box file.  Reference: the FP32 AP of
  calibrate's FP32 session (``ortrun``'s ``"float"``) on the same frames, outputs concatenated over all frames, then
  ``DetectionAPMetric`` (calibrate's streamed evaluator gives exactly that AP:
  tests/calibrate/test_detection_stream.py).  Bench's session and calibrate's run the same float graph with
  different kernels and fusions; their raw outputs are compared at 1e-4 of the output scale, and AP, a step function
  of the score ranking and of IoUs, moves only when such a difference swaps two ranked scores or moves an IoU across
  a threshold, so AP is compared at 1e-9 (the float summation order of the means).  The interval is checked against
  ``paired_bootstrap`` of the reference's detections (one class: class_bootstrap's mean is paired_bootstrap's
  result).  The same frames exported to COCO JSON give the same numbers, and a TorchScript trace of the SSD port
  gives ONNX Runtime's AP (outputs within 1e-4 of scale, the export's own check).
* Classifier: tiny ONNX classifiers (4 classes: no top-5; 6 classes: top-5).  Reference: ``onnxruntime`` called
  directly on the contract's tensors, the labels written so that the expected accuracy is an exact fraction.
  A fixed-batch model pads its last batch: same accuracy.
* Two classes (synthetic): each class's AP is evaluate_ap's on its boxes alone, the mean their mean.
* Bad input: one line on stderr, exit 1, before the timed run.
"""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
cv2 = pytest.importorskip("cv2")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from jetforge.cli.main import main  # noqa: E402
from jetforge.runtime.inputs import Preprocess  # noqa: E402
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, write_sidecar  # noqa: E402
from test_info import CLASSES, H, W, make_net  # noqa: E402

PEOPLE = "src/jetforge/vision/data/people_boxes.json"
FAST = ["--iterations", "3", "--warmup", "1"]


def bench(capsys, *argv):
    rc = main(["bench", *map(str, argv), *FAST, "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return json.loads(captured.out)


def one_line_error(capsys, *argv):
    """The refusal's one line; it comes before the timed run (no progress bar of the benchmark was drawn)."""
    rc = main(["bench", *map(str, argv), *FAST])
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("jetforge: error:")]
    assert rc == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert "steady state" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def root():
    from pathlib import Path

    return Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def detector(root):
    from jetforge.assets import asset_dir
    from jetforge.workflow.shipped_models import shipped_model

    if not (asset_dir("opencv_samples") / "vtest.avi").is_file():
        pytest.skip("the labelled clips are not in the asset cache (jetforge assets fetch)")
    return shipped_model("ssdlite-person-192").onnx


# ------------------------------------------------------------------------------------------------ detectors
def test_detector_ap_is_calibrates_fp32_ap_on_the_same_frames(detector, root, capsys):
    from jetforge.calibrate import ortrun
    from jetforge.calibrate.detection_eval import person_set_frames
    from jetforge.calibrate.evaluate import preprocess_samples
    from jetforge.calibrate.metrics import DetectionAPMetric
    from jetforge.runtime.model_facts import model_facts
    from jetforge.runtime.session import open_session
    from jetforge.vision.detection_metrics import paired_bootstrap

    labels = root / PEOPLE
    got = bench(capsys, detector, "--accuracy", labels, "--accuracy-samples", 20)["accuracy"]
    facts = model_facts(detector)
    metric = DetectionAPMetric(sidecar=facts)
    frames = person_set_frames(labels, 20, model_labels=metric.decoder.labels)
    batches, _ = preprocess_samples(frames.images(), facts.input, batch_size=8)
    references = ortrun.run(detector, batches, "float")  # calibrate's FP32 session, outputs over all frames
    ref = metric.compute(references, references, frames.targets)
    with open_session(detector, threads=2) as session:  # the backend bench timed: raw outputs agree at 1e-4 of scale
        mine = [session.infer({"input": b}) for b in batches]
    for k, spec in enumerate(session.outputs):
        ours = np.concatenate([m[spec.name] for m in mine])
        scale = float(np.abs(references[k]).max())
        np.testing.assert_allclose(ours, references[k], rtol=0, atol=1e-4 * scale)
    assert got["task"] == "detect" and got["images"] == ref["frames"] == 20 and got["available"] == 94
    assert got["boxes"] == ref["boxes"] and got["limit"] == "--accuracy-samples 20" and got["padded"] == 0
    assert abs(got["mean"]["ap50"] - ref["ap50_fp32"]) <= 1e-9 and abs(got["mean"]["ap"] - ref["ap_fp32"]) <= 1e-9
    person = got["classes"]["person"]
    assert person["ap50"] == got["mean"]["ap50"] and person["boxes"] == got["boxes"] > 0
    assert 0.3 < got["mean"]["ap50"] < 1.0  # a working person detector, not a degenerate 0 or 1
    boxes, scores, _ = metric.detections(references, frames.targets)
    t = frames.targets
    boot = paired_bootstrap([x.boxes for x in t], [x.difficult for x in t], (boxes, scores), n_resamples=2000, seed=0)
    assert got["mean"]["ap50_ci"] == pytest.approx(boot["a"]["ap50_ci"], abs=1e-9)
    assert got["mean"]["ap_ci"] == pytest.approx(boot["a"]["ap_ci"], abs=1e-9)
    lo, hi = got["mean"]["ap50_group_ci"]  # the person set groups frames in 10-frame blocks of a clip
    assert lo <= got["mean"]["ap50"] <= hi and got["interval"]["groups"] <= 20


def test_printed_report_and_out_dir_carry_the_accuracy(detector, root, tmp_path, capsys):
    out = tmp_path / "res"
    rc = main(["bench", str(detector), *FAST, "--accuracy", str(root / PEOPLE), "--accuracy-samples", "4",
               "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "accuracy     4 of 94 images of" in text and "person" in text and "AP@0.5 [95% CI images]" in text
    written = json.loads((out / "bench.json").read_text())
    assert written["accuracy"]["images"] == 4 and written["accuracy"]["mean"]["ap50"] >= 0.0


def test_coco_export_of_the_same_frames_gives_the_same_ap(detector, root, tmp_path, capsys):
    from jetforge.assets import asset_dir
    from jetforge.vision.person_coco import export_person_coco

    coco = export_person_coco(tmp_path / "people.coco.json", "heldout", assets_root=asset_dir("opencv_samples").parent)
    by_coco = bench(capsys, detector, "--accuracy", coco, "--accuracy-samples", 12)["accuracy"]
    by_people = bench(capsys, detector, "--accuracy", root / PEOPLE, "--accuracy-samples", 12)["accuracy"]
    assert by_coco["format"] == "COCO JSON" and by_coco["images"] == by_people["images"] == 12
    assert by_coco["boxes"] == by_people["boxes"]  # the same frames (PNG is lossless), the same boxes
    for key in ("ap50", "ap50_ci", "ap", "ap_ci"):
        assert by_coco["mean"][key] == by_people["mean"][key], key


@pytest.mark.slow
def test_torchscript_of_the_port_gives_onnxruntimes_ap(root, tmp_path, capsys):
    """The SSD port exported to ONNX and traced to TorchScript: two backends, one AP (outputs agree at 1e-4 of
    scale, the export's own check; the AP tolerance as above)."""
    torch = pytest.importorskip("torch")
    from jetforge.assets import asset_dir, asset_path
    from jetforge.compress.models import PRETRAINED
    from jetforge.compress.models.ssdlite_export import export_person_detector
    from jetforge.runtime.sidecar import read_sidecar

    if not (asset_dir("opencv_samples") / "vtest.avi").is_file():
        pytest.skip("the labelled clips are not in the asset cache (jetforge assets fetch)")
    spec = PRETRAINED["ssdlite_mobilenet_v2_person"]
    made = export_person_detector(asset_path(spec.asset, spec.filename), tmp_path / "det.onnx")
    with torch.no_grad():
        traced = torch.jit.trace(made["model"].eval(), torch.zeros(tuple(spec.input_shape)))
    torch.jit.save(traced, str(tmp_path / "det.ts"))
    write_sidecar(tmp_path / "det.ts", read_sidecar(tmp_path / "det.onnx"))
    args = ["--accuracy", root / PEOPLE, "--accuracy-samples", 10]
    by_ort = bench(capsys, tmp_path / "det.onnx", *args)
    by_torch = bench(capsys, tmp_path / "det.ts", "--trust-pickle", *args)
    assert by_torch["backend"]["backend"] == "pytorch" and by_ort["backend"]["backend"] == "onnxruntime"
    for key in ("ap50", "ap"):
        assert abs(by_torch["accuracy"]["mean"][key] - by_ort["accuracy"]["mean"][key]) <= 1e-9, key


# ------------------------------------------------------------------------------------------------ classifiers
def classifier(path, classes, batch=None, dynamic_size=False):
    """GlobalAveragePool -> Flatten -> Gemm(3 -> classes), with its sidecar; ``batch``: a fixed batch."""
    rng = np.random.default_rng(1)
    n = batch if batch is not None else "N"
    size = ["H", "W"] if dynamic_size else [H, W]
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w", "b"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3] + size)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, classes])],
                              [numpy_helper.from_array(rng.standard_normal((classes, 3)).astype(np.float32), "w"),
                               numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    dims = [batch if batch is not None else -1, 3] + ([-1, -1] if dynamic_size else [H, W])
    write_sidecar(path, ModelSidecar(task="classify", model_name="cls", inputs=[TensorSpec("x", dims)],
                                     outputs=[TensorSpec("y", [dims[0], classes])],
                                     preprocess=Preprocess(height=H, width=W),
                                     labels=["k%d" % i for i in range(classes)]))
    return path


def labelled_images(folder, model, count=12, wrong=3):
    """``count`` images; ORT's own argmax (called directly) labels all but the last ``wrong``, which get another
    class: top-1 is (count - wrong) / count exactly.  Returns (names, labels, logits)."""
    from jetforge.runtime.model_facts import model_facts

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    contract = model_facts(model).input
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names, logits = [], []
    for i in range(count):
        image = rng.integers(0, 256, (24 + i, 30, 3), dtype=np.uint8)
        image[:, :, i % 3] //= 4  # colours differ, so the predictions do
        name = "img_%02d.png" % i
        cv2.imwrite(str(folder / name), image)
        names.append(name)
        logits.append(session.run(None, {"x": contract.apply(image)[None]})[0][0])
    logits = np.asarray(logits)
    labels = logits.argmax(axis=1)
    labels[count - wrong:] = (labels[count - wrong:] + 1) % logits.shape[1]
    return names, labels, logits


def test_classifier_top1_against_onnxruntime_called_directly(tmp_path, capsys):
    model = tmp_path / "tiny.onnx"
    make_net(model)  # tests/cli/test_info.py's classifier: 4 classes
    names, labels, _ = labelled_images(tmp_path / "images", model)
    (tmp_path / "images" / "labels.txt").write_text("".join("%s\t%d\n" % nl for nl in zip(names, labels)))
    got = bench(capsys, model, "--accuracy", tmp_path / "images" / "labels.txt", "--batch", 5)["accuracy"]
    assert got["task"] == "classify" and got["images"] == 12 and got["classes"] == CLASSES
    assert got["top1"] == pytest.approx(9 / 12, abs=1e-12) and "top5" not in got  # 4 classes: no top-5
    assert got["top1_ci"][0] <= 0.75 <= got["top1_ci"][1] and got["padded"] == 3 and got["batch"] == 5
    # the label file elsewhere, naming bare files: --accuracy-images says where they are; names as labels work too
    (tmp_path / "names.txt").write_text("".join("%s\t%s\n" % (n, "abcd"[k]) for n, k in zip(names, labels)))
    again = bench(capsys, model, "--accuracy", tmp_path / "names.txt", "--accuracy-images", tmp_path / "images",
                  "--accuracy-samples", 4)["accuracy"]
    assert again["images"] == 4 and again["limit"] == "--accuracy-samples 4"
    assert again["top1"] == pytest.approx(3 / 4, abs=1e-12)  # images 0, 4, 7, 11 (evenly spread): 11 is wrong


def test_classifier_top5_and_a_fixed_batch_padded(tmp_path, capsys):
    model = classifier(tmp_path / "six.onnx", 6)
    names, labels, logits = labelled_images(tmp_path, model, count=11, wrong=4)
    (tmp_path / "labels.txt").write_text("".join("%s\t%d\n" % nl for nl in zip(names, labels)))
    in_top5 = [(row > row[k]).sum() < 5 for row, k in zip(logits, labels)]  # the label among the 5 highest
    got = bench(capsys, model, "--accuracy", tmp_path / "labels.txt")["accuracy"]
    assert got["top1"] == pytest.approx(7 / 11, abs=1e-12) and got["top5"] == pytest.approx(np.mean(in_top5))
    assert got["top5_ci"][0] <= got["top5"] <= got["top5_ci"][1]
    fixed = classifier(tmp_path / "fixed.onnx", 6, batch=4)  # same weights, batch fixed at 4: 11 = 4 + 4 + 3 (+1 pad)
    padded = bench(capsys, fixed, "--accuracy", tmp_path / "labels.txt")["accuracy"]
    assert padded["batch"] == 4 and padded["padded"] == 1 and padded["top1"] == got["top1"]
    assert padded["top5"] == got["top5"]


# ------------------------------------------------------------------------------------------------ bad input
def test_refusals_are_one_line(tmp_path, detector, root, capsys):
    model = tmp_path / "tiny.onnx"
    make_net(model)
    names, labels, _ = labelled_images(tmp_path / "images", model, count=3, wrong=0)
    cls_labels = tmp_path / "images" / "labels.txt"
    cls_labels.write_text("".join("%s\t%d\n" % nl for nl in zip(names, labels)))
    assert "do not exist" in one_line_error(capsys, model, "--accuracy", tmp_path / "none.txt")
    assert "classification label list" in one_line_error(capsys, detector, "--accuracy", cls_labels)
    assert "detection label set" in one_line_error(capsys, model, "--accuracy", root / PEOPLE)
    assert "go with --accuracy" in one_line_error(capsys, model, "--accuracy-samples", 3)
    assert "--accuracy-images" in one_line_error(capsys, detector, "--accuracy", root / PEOPLE, "--accuracy-images",
                                                 tmp_path)
    bare = tmp_path / "bare.onnx"
    make_net(bare, sidecar=False)
    assert "sidecar" in one_line_error(capsys, bare, "--accuracy", cls_labels)
    (tmp_path / "out.txt").write_text("../../etc/passwd.png\t0\n")
    assert "leaves its folder" in one_line_error(capsys, model, "--accuracy", tmp_path / "out.txt")
    (tmp_path / "gone.txt").write_text("missing_1.png\t0\nmissing_2.png\t1\n")
    assert "2 of the 2 images" in one_line_error(capsys, model, "--accuracy", tmp_path / "gone.txt")
    big = classifier(tmp_path / "any_size.onnx", 6, dynamic_size=True)
    assert "contract" in one_line_error(capsys, big, "--shapes", "x=1x3x32x32", "--accuracy", cls_labels)
    car = tmp_path / "cars.json"  # a COCO set whose one class the person detector does not have
    cv2.imwrite(str(tmp_path / "c.png"), np.zeros((20, 30, 3), np.uint8))
    car.write_text(json.dumps({"images": [{"id": 1, "file_name": "c.png", "width": 30, "height": 20}],
                               "annotations": [{"id": 1, "image_id": 1, "category_id": 3, "bbox": [1, 1, 5, 5]}],
                               "categories": [{"id": 3, "name": "car"}]}))
    assert "not among the model's" in one_line_error(capsys, detector, "--accuracy", car)


def test_two_classes_report_each_class_and_their_mean():
    """detection_summary with two classes: each class's AP is evaluate_ap on that class's boxes alone, its interval
    paired_bootstrap's on them (same seed, same draws), the mean the mean of the two; the printed table has a mean
    row.  Six synthetic images: class 0 found well, class 1 with a false alarm ranked first."""
    from jetforge.calibrate.bench_accuracy import RESAMPLES, accuracy_lines, detection_summary
    from jetforge.calibrate.metrics import DetectionTarget
    from jetforge.vision.detection_metrics import evaluate_ap, paired_bootstrap

    rng = np.random.default_rng(3)
    targets, boxes, scores, classes = [], [], [], []
    for i in range(6):
        gt = np.array([[10, 10, 50, 60], [100, 20, 160, 90]], np.float32) + i
        targets.append(DetectionTarget(gt, np.array([False, i == 5]), (200, 300), "clip:%d" % (i // 3),
                                       np.array([0, 1])))
        shift = rng.uniform(-3, 3, (2, 4)).astype(np.float32)
        boxes.append(np.vstack([gt + shift, [[200, 100, 240, 150]]]).astype(np.float32))
        scores.append(np.array([0.9 - 0.05 * i, 0.5, 0.95 if i % 2 else 0.2], np.float32))
        classes.append(np.array([0, 1, 1]))
    got = detection_summary(targets, (boxes, scores, classes), ("cat", "dog"))
    per_class = []
    for c, name in enumerate(("cat", "dog")):
        gt_b = [t.boxes[t.classes == c] for t in targets]
        gt_d = [t.difficult[t.classes == c] for t in targets]
        det = ([b[k == c] for b, k in zip(boxes, classes)], [s[k == c] for s, k in zip(scores, classes)])
        ref = evaluate_ap(gt_b, gt_d, *det)
        boot = paired_bootstrap(gt_b, gt_d, det, n_resamples=RESAMPLES, seed=0)
        entry = got["classes"][name]
        assert entry["ap50"] == pytest.approx(ref.ap50, abs=1e-12) and entry["ap"] == pytest.approx(ref.ap, abs=1e-12)
        assert entry["ap50_ci"] == pytest.approx(boot["a"]["ap50_ci"], abs=1e-12)
        per_class.append(ref.ap50)
    assert got["classes"]["cat"]["boxes"] == 6 and got["classes"]["dog"]["boxes"] == 5  # one dog box is difficult
    assert got["boxes"] == 11 and got["difficult_boxes"] == 1 and got["interval"]["groups"] == 2
    assert got["mean"]["ap50"] == pytest.approx(np.mean(per_class), abs=1e-12) and per_class[0] > per_class[1]
    block = dict(got, task="detect", images=6, available=6, labels="x.json", format="COCO JSON", limit="all",
                 batch=1, padded=0, group_frames=10,
                 decoder={"name": "yolov8", "score_threshold": 0.01, "max_detections": 100})
    text = "\n".join(accuracy_lines(block))
    assert "mean" in text and "cat" in text and "dog" in text and "10-frame groups" in text
