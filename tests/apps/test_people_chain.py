"""The person detector through the whole chain, in one test: export -> calibrate on real frames (training
segments only) -> Q/DQ parse and build in TensorRT-RTX (CPU only) -> dla-check -> bundle -> the people app on
the bundle's FP32 model -> the INT8-simulated detections scored against the labelled held-out frames.

What runs here is real: the exported SSDLite-MobileNetV2 body (the app's own cached export, made by
``ensure_person_detector`` from the frozen graph when missing), ONNX Runtime, TensorRT-RTX's parser and builder,
OpenCV decoding the clip.  Nothing stands in for a Jetson here: dla-check is the rules-based prediction it always
is, and the engine built is TensorRT-RTX's (JetPack TensorRT and the DLA are not executed).

The AP comes from the INT8 evaluator (``jetforge.calibrate.evaluate.Evaluator``) with its registered
``detection_ap`` metric: FP32 and the Q/DQ model in simulated INT8 arithmetic, decoded by the model's own SSD
postprocess and scored against the labelled boxes.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")  # the export (only when the cache has no current one)
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("tensorrt_rtx", reason="tensorrt_rtx is not installed (pip install tensorrt-rtx-cu13)")

from jetforge.vision.ssd_detector import SsdPeopleDetector  # noqa: E402
from jetforge.assets import asset_path, get_spec  # noqa: E402
from jetforge.calibrate.calibrate_model import calibrate  # noqa: E402
from jetforge.calibrate.evaluate import Evaluator  # noqa: E402
from jetforge.calibrate.metrics import DetectionTarget  # noqa: E402
from jetforge.vision.person_labels import load_person_labels, read_person_labels, training_frames  # noqa: E402
from jetforge.cli.main import main  # noqa: E402
from jetforge.workflow.model_refs import ensure_person_detector  # noqa: E402
from jetforge.fileio import sha256_file  # noqa: E402
from jetforge.runtime.inputs import input_contract  # noqa: E402
from jetforge.runtime.sidecar import read_sidecar  # noqa: E402
from jetforge.runtime.tensorrt import check_onnx_builds  # noqa: E402

pytestmark = pytest.mark.slow

CALIBRATION_STEP = 40  # every 40th training-segment frame of vtest.avi: 12 frames spread over the clip
HELD_OUT_STEP = 3  # every 3rd held-out labelled vtest frame: 27 frames, ~150 people


def _export(tmp_path: Path) -> Path:
    cached, _ = ensure_person_detector()
    sidecar = read_sidecar(cached, verify_hash=True)
    assert sidecar.task == "detect" and sidecar.labels == ["person"]
    assert sidecar.produced_by["weights_sha256"] == get_spec("ssdlite_mobilenet_v2_person").files[
        "frozen_inference_graph.pb"]
    model = tmp_path / "det.onnx"  # calibration writes next to its inputs' copy, never into the cache
    shutil.copyfile(cached, model)
    shutil.copyfile(str(cached) + ".json", str(model) + ".json")
    return model


def _calibration_frames(folder: Path) -> int:
    import cv2

    labels = read_person_labels()
    train = [s for s in labels.segments if s.clip == "vtest" and s.split == "train"]
    folder.mkdir()
    n = 0
    assets_root = asset_path("opencv_samples", "vtest.avi").parent.parent
    for clip, index, image in training_frames(assets_root, step=CALIBRATION_STEP, clips=["vtest"]):
        assert any(index in s for s in train)  # training segments only: never a held-out or guard frame
        cv2.imwrite(str(folder / ("%s_%04d.png" % (clip, index))), image)
        n += 1
    return n


def _dla_check(model: Path, cache: Path, capsys) -> dict:
    code = main(["dla-check", str(model), "--target", "orin-nx-16gb", "--precision", "int8", "--calib", str(cache),
                 "--json"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    return json.loads(out)


def _int8_vs_fp32_ap(model: Path, qdq: Path) -> dict:
    """Person AP@0.5 of the FP32 body and of its Q/DQ model in simulated TensorRT INT8 arithmetic, through the INT8
    evaluator and its registered ``detection_ap`` metric (the same path as ``jetforge calibrate --eval``)."""
    assets_root = asset_path("opencv_samples", "vtest.avi").parent.parent
    frames = load_person_labels("heldout", assets_root=assets_root, clips=["vtest"])[::HELD_OUT_STEP]
    sidecar = read_sidecar(model)
    contract = input_contract(sidecar, "image")
    batches = [contract.batch([f.image for f in frames[i:i + 8]]) for i in range(0, len(frames), 8)]
    targets = [DetectionTarget(f.boxes, f.difficult, f.image.shape[:2]) for f in frames]
    evaluator = Evaluator(str(model), batches, metrics=("detection_ap",), targets=targets,
                          metric_options={"detection_ap": {"sidecar": sidecar, "n_resamples": 200}})
    result = evaluator.evaluate(str(qdq)).metrics["detection_ap"]
    assert result["frames"] == len(frames) and evaluator.label  # simulated INT8 arithmetic against FP32
    return result


def test_person_detector_through_the_whole_chain(tmp_path, capsys):
    model = _export(tmp_path)

    calib_dir = tmp_path / "calibration_frames"
    n = _calibration_frames(calib_dir)
    assert n == 12  # 0-99, 230-339, 470-579, 710-794: three each
    result = calibrate(model, calib_dir, samples=n, min_samples=n, plots=False, progress=False,
                       out=tmp_path / "det.calib")
    assert result.samples == n and result.qdq_path.is_file()
    convs = [name for name in result.amax if "Conv" in name]
    assert len(result.amax) > 100 and convs and all(np.isfinite(v) and v > 0 for v in result.amax.values())

    build = check_onnx_builds(result.qdq_path, prefer="tensorrt_rtx")
    assert build.library == "tensorrt_rtx" and build.outputs == ["box_encodings", "class_logits"]
    assert build.serialized_bytes > 1_000_000 and tuple(build.inputs["input"]) == (1, 3, 300, 300)

    dla = _dla_check(model, result.cache_path, capsys)
    summary = dla["summary"]
    # the body on the DLA in one subgraph; only the two anchor-axis concatenations fall back to the GPU
    assert summary["dla_subgraphs"] == 1 and sorted(f["onnx_op"] for f in dla["gpu_fallback"]) == ["Concat", "Concat"]
    assert summary["dla_flops_share"] > 0.99

    bundle = tmp_path / "bundle"
    code = main(["bundle", "create", str(model), "--target", "orin-nx-16gb", "--out", str(bundle), "--calib",
                 str(result.cache_path), "--qdq", "--json"])
    capsys.readouterr()
    assert code == 0
    assert sha256_file(bundle / "model.onnx") == sha256_file(model)
    assert (bundle / "model.qdq.onnx").is_file() and (bundle / "manifest.json").is_file()

    # the people app on the bundle's FP32 model: the same detections as the detector run directly
    out = tmp_path / "app"
    code = main(["app", "people", "-q", "--detector-model", str(bundle / "model.onnx"), "--max-frames", "4",
                 "--no-video", "--no-plots", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines() if '"people"' in x]
    import cv2

    cap = cv2.VideoCapture(str(asset_path("opencv_samples", "vtest.avi")))
    with SsdPeopleDetector(bundle / "model.onnx") as direct:
        for e in events:
            ok, image = cap.read()
            d = direct(image)
            got = np.array([row[:5] for row in e["detections"]]).reshape(-1, 5)
            # events round boxes to 0.1 px and scores to 1e-3: that is the tolerance
            assert len(got) == len(d) >= 2
            assert np.allclose(got[:, :4], d.boxes, atol=0.051) and np.allclose(got[:, 4], d.scores, atol=5e-4)
    cap.release()

    ap = _int8_vs_fp32_ap(model, result.qdq_path)
    # Seen when written: FP32 AP@0.5 0.771, INT8 (12 calibration frames) 0.752 on these 27 frames / 155 people
    # (HOG: 0.19 on the whole held-out set).  Floor 0.6: far above HOG, room for other CPUs' rounding.  INT8
    # within 0.05: a few of the 155 people flipping between found and missed; the 0.02 goal is judged
    # on the whole held-out set with its bootstrap interval (the benchmarks), not on this sample.
    assert ap["ap50_fp32"] > 0.6, ap
    assert abs(ap["ap50_int8"] - ap["ap50_fp32"]) <= 0.05 and abs(ap["ap50_diff"]) <= 0.05, ap
    assert ap["ap50_diff_ci_low"] <= ap["ap50_diff"] <= ap["ap50_diff_ci_high"]
