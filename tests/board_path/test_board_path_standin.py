"""The board path in CI, through the TensorRT stand-in: ``bundle create`` -> ``build`` -> ``app --model ENGINE``.

For every shipped model kind -- the classifier (MobileNetV2), the SSD person detector, the action clip model and
the MTCNN pyramid -- the user's commands run as on a board, with the TensorRT stand-in (tests/standins: TensorRT's
Python API over ONNX Runtime, CUDA's over host memory) in place of JetPack's TensorRT: the bundle is built into an
engine by jetforge's real builder code, the app opens that engine through
:class:`~jetforge.runtime.tensorrt.session.TrtSession` (buffers, copies, CUDA-graph capture and replay) and its
events are compared with the same app on the bundle's ONNX model through ONNX Runtime (tolerance in conftest.py).

Not shown here (the stand-in cannot): TensorRT's kernels and FP16 arithmetic (an FP16 engine computes in FP32
here), INT8 engines, DLA, timing.  Every engine records TensorRT ``10.3.0+stand-in`` and says so.
"""

import json

import pytest

from tests.board_path.conftest import (MTCNN_PROFILES, TARGET, TENSORRT, first_difference, profile_config,
                                       read_events, run_cli)

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

FRAMES = 6  # frames per app run: enough for every stage (tracks, clips) to produce events, few for CI's 2 cores

def make_bundle(model, out, *extra):
    assert run_cli(["-q", "bundle", "create", str(model), "--target", TARGET, "--tensorrt", TENSORRT,
                    "--out", str(out)] + list(extra)) == 0
    return out


def build_engine(bundle, engine, device):
    """``jetforge build BUNDLE --target ... --out ENGINE`` through the stand-in; checks the engine says what it is."""
    before = device.captures
    assert run_cli(["-q", "build", str(bundle), "--target", TARGET, "--out", str(engine)]) == 0
    sidecar = json.loads((engine.parent / (engine.name + ".json")).read_text())
    assert sidecar["tensorrt_version"] == "10.3.0+stand-in"  # no stand-in engine passes for a TensorRT one
    assert engine.read_bytes().startswith(b"JETFORGE-TENSORRT-STAND-IN-PLAN\n")
    assert device.captures == before
    return engine


def run_app(app, out, *args):
    assert run_cli(["-q", "app", app, "--out", str(out), "--max-frames", str(FRAMES), "--no-plots", "--no-video"]
                   + list(args)) == 0
    return read_events(out / "events.jsonl")


def assert_same_events(engine_events, onnx_events):
    assert engine_events, "the engine run wrote no events"
    found = first_difference(engine_events, onnx_events)
    assert not found, "engine (stand-in) vs ONNX Runtime: " + found


def test_classifier_bundle_build_app(standin, mobilenet_onnx, bikes_clip, tmp_path):
    device = standin
    bundle = make_bundle(mobilenet_onnx, tmp_path / "bundle")
    engine = build_engine(bundle, tmp_path / "classifier.engine", device)
    on_engine = run_app("classify", tmp_path / "engine", "--model", str(engine), "--source", str(bikes_clip))
    on_onnx = run_app("classify", tmp_path / "onnx", "--model", str(bundle / "model.onnx"), "--source",
                      str(bikes_clip), "--threads", "1")
    assert_same_events(on_engine, on_onnx)
    metrics = json.loads((tmp_path / "engine" / "metrics.json").read_text())
    assert metrics["model"]["backend_info"]["version"] == "10.3.0+stand-in"  # the run says what ran it
    assert device.captures >= 1 and device.launches >= FRAMES - 2  # the session ran its CUDA-graph path


def test_person_detector_bundle_build_app(standin, person_detector, vtest_clip, tmp_path):
    device = standin
    bundle = make_bundle(person_detector, tmp_path / "bundle")
    engine = build_engine(bundle, tmp_path / "detector.engine", device)
    common = ["--source", str(vtest_clip), "--detector", "ssd"]
    on_engine = run_app("people", tmp_path / "engine", "--detector-model", str(engine), *common)
    on_onnx = run_app("people", tmp_path / "onnx", "--detector-model", str(bundle / "model.onnx"), *common)
    assert_same_events(on_engine, on_onnx)


def test_action_bundle_build_app(standin, action_model, person_detector, vtest_clip, tmp_path):
    device = standin
    bundle = make_bundle(action_model, tmp_path / "bundle", "--shape", "clip=1x3x8x112x112")
    engine = build_engine(bundle, tmp_path / "action.engine", device)
    common = ["--source", str(vtest_clip), "--detector-model", str(person_detector)]
    on_engine = run_app("action", tmp_path / "engine", "--model", str(engine), *common)
    on_onnx = run_app("action", tmp_path / "onnx", "--model", str(bundle / "model.onnx"), *common)
    assert_same_events(on_engine, on_onnx)


def test_mtcnn_bundles_build_app(standin, mtcnn_models, carphone_clip, tmp_path):
    device = standin
    engines = tmp_path / "engines"
    engines.mkdir()
    for net, shapes in MTCNN_PROFILES.items():
        bundle = make_bundle(mtcnn_models / ("%s.onnx" % net), tmp_path / ("bundle-" + net),
                             *profile_config(tmp_path, net, shapes))
        build_engine(bundle, engines / ("%s.engine" % net), device)
    on_engine = run_app("faces", tmp_path / "engine", "--models", str(engines), "--source", str(carphone_clip))
    on_onnx = run_app("faces", tmp_path / "onnx", "--models", str(mtcnn_models), "--source", str(carphone_clip))
    assert_same_events(on_engine, on_onnx)



def test_shipped_student_by_name_bundle_build_app(standin, vtest_clip, tmp_path):
    """The new user's path: ``bundle create ssdlite-person-192`` (a shipped name: its calibration cache and Q/DQ
    model go with it) -> build -> the people app on the engine, equal to the app on the shipped ONNX by name."""
    device = standin
    # FP16: the stand-in executes no INT8 engine (it refuses one: tested in test_engines_standin.py); the bundle
    # still carries the INT8 files for the board
    bundle = make_bundle("ssdlite-person-192", tmp_path / "bundle", "--qdq", "--precision", "fp16")
    roles = {f["role"] for f in json.loads((bundle / "manifest.json").read_text())["files"]}
    assert {"calib", "qdq"} <= roles  # the shipped cache (taken by name) and Q/DQ model (found beside it) went in
    engine = build_engine(bundle, tmp_path / "student.engine", device)
    common = ["--source", str(vtest_clip), "--detector", "ssd"]
    on_engine = run_app("people", tmp_path / "engine", "--detector-model", str(engine), *common)
    on_onnx = run_app("people", tmp_path / "onnx", "--detector-model", "ssdlite-person-192", *common)
    assert_same_events(on_engine, on_onnx)
