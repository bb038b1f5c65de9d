"""``board-check`` on a bundle of each shipped model kind, with the TensorRT stand-in doing TensorRT's part.

:func:`jetforge.deploy.boardcheck.check.run_board_check` runs as on a board: the bundle verified, the engine built by
jetforge's builder code (``JetsonTensorRT.build``) and run on the bundle's samples through ``TrtSession``
(``JetsonTensorRT.run``), its outputs compared with the FP32 references the bundle carries.  Only the timing is
replaced: :class:`StandInJetsonTensorRT` measures nothing (there is no GPU or TensorRT to time), so the report's
latency is ``None`` and no estimator point is written -- no number of the stand-in passes for a board's.  The report
names the stand-in (TensorRT ``10.3.0+stand-in``).  The target has no DLA, so the only engine is the GPU FP16 one;
its outputs equal the FP32 reference up to float summation order (the stand-in computes FP16 engines in FP32: FP16
arithmetic, like INT8 and DLA, is not shown here).
"""

import json

import pytest

from tests.board_path.conftest import MTCNN_PROFILES, TARGET, TENSORRT, profile_config, run_cli

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

SAMPLES = 2


def check_bundle(model, sample_source, tmp_path, *extra):
    """bundle create (with samples from ``sample_source`` unless None) -> board-check; the GPU engine was built."""
    bundle = tmp_path / "bundle"
    samples = [] if sample_source is None else ["--samples", str(sample_source), "--samples-count", str(SAMPLES)]
    assert run_cli(["-q", "bundle", "create", str(model), "--target", TARGET, "--tensorrt", TENSORRT,
                    "--out", str(bundle)] + samples + list(extra)) == 0
    assert run_cli(["board-check", str(bundle), "--target", TARGET, "--out", str(tmp_path / "report"),
                    "--no-tegrastats", "--iterations", "2"]) == 0
    report = json.loads((tmp_path / "report" / "board-check.json").read_text())
    text = (tmp_path / "report" / "board-check.txt").read_text()
    assert report["board"]["tensorrt_installed"] == "10.3.0+stand-in" and "TensorRT 10.3.0+stand-in" in text
    assert [e["name"] for e in report["engines"]] == ["gpu-fp16"]
    engine = report["engines"][0]
    assert engine["built"], engine
    # timing is not faked: the stand-in refuses it, the report says so, no estimator point is written
    assert engine["latency"]["measured_ms"] is None and engine["latency"]["percentiles_ms"] is None
    assert report["estimate_points"] == []
    timing = [n for n in report["notes"] if n.startswith("gpu-fp16: latency not measured: ")]
    assert len(timing) == 1, report["notes"]
    # a static input reaches the timer, which the stand-in refuses; PNet's free height/width stops the benchmark
    # before it (it cannot choose a shape): either way nothing is timed
    assert "stand-in" in timing[0] or "cannot choose" in timing[0], timing
    return report, engine


def test_board_check_classifier_bundle(standin, mobilenet_onnx, bikes_clip, tmp_path):
    report, engine = check_bundle(mobilenet_onnx, bikes_clip, tmp_path)
    assert report["status"] == "pass" and engine["ok"], engine.get("reasons")
    assert engine["vs_fp32"]["top1_agreement"] == 1.0
    for name, row in engine["vs_fp32"]["outputs"].items():
        assert row["sqnr_db"] > 80.0, (name, row)  # FP32 vs FP32: summation order only (~1e-6 relative)
    assert standin.launches >= SAMPLES - 1  # the samples ran through TrtSession's CUDA-graph path


def test_board_check_person_detector_bundle(standin, person_detector, vtest_clip, tmp_path):
    report, engine = check_bundle(person_detector, vtest_clip, tmp_path)
    assert report["status"] == "pass" and engine["ok"], engine.get("reasons")
    for name, row in engine["vs_fp32"]["outputs"].items():
        assert row["sqnr_db"] > 80.0, (name, row)


def test_board_check_action_bundle(standin, action_model, tmp_path):
    """`bundle create --samples` takes image models only: a clip model's bundle has no samples, so board-check
    builds and opens its engine but compares no outputs (and says so); test_engines_standin.py compares them."""
    report, engine = check_bundle(action_model, None, tmp_path, "--shape", "clip=1x3x8x112x112")
    assert report["status"] == "pass" and engine["ok"] and "vs_fp32" not in engine
    assert any("no samples" in n for n in report["notes"])


@pytest.mark.parametrize("net", ["pnet", "rnet", "onet"])
def test_board_check_mtcnn_bundles(standin, mtcnn_models, tmp_path, net):
    """The MTCNN nets' inputs are dynamic (PNet's pyramid, RNet/ONet batches): bundles with a profile each; no samples
    (PNet's pyramid input is not an image `--samples` can make; RNet/ONet take face candidates, not frames)."""
    report, engine = check_bundle(mtcnn_models / ("%s.onnx" % net), None, tmp_path,
                                  *profile_config(tmp_path, net, MTCNN_PROFILES[net]))
    assert report["status"] == "pass" and engine["ok"]


@pytest.mark.parametrize("net", ["pnet", "rnet", "onet"])
def test_board_check_mtcnn_bundles(standin, mtcnn_models, tmp_path, net):
    """The MTCNN nets' inputs are dynamic (PNet's pyramid, RNet/ONet batches): bundles with a profile each; no samples
    (PNet's pyramid input is not an image `--samples` can make; RNet/ONet take face candidates, not frames)."""
    report, engine = check_bundle(mtcnn_models / ("%s.onnx" % net), None, tmp_path,
                                  *profile_config(tmp_path, net, MTCNN_PROFILES[net]))
    assert report["status"] == "pass" and engine["ok"]


def test_board_check_report_text_names_what_was_not_measured(standin, mobilenet_onnx, bikes_clip, tmp_path):
    check_bundle(mobilenet_onnx, bikes_clip, tmp_path)
    text = (tmp_path / "report" / "board-check.txt").read_text()
    data = json.loads((tmp_path / "report" / "board-check.json").read_text())
    assert data["engines"][0]["latency"]["measured_ms"] is None
    assert "stand-in" in text or "stand-in" in json.dumps(data["board"])
