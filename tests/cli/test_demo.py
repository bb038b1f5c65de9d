"""`jetforge demo`: the people showcase by default, the classification demo (`--app classify`) end to end on
the real clip and model, their error paths, and the classify building blocks."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from jetforge.cli.main import main
from jetforge.apps.tasks.classify import ClassifyHead, draw_overlay, softmax
from jetforge.runtime.inputs import IMAGENET_TORCHVISION
from jetforge.runtime.sidecar import sidecar_path

STAGES = ["decode", "preprocess", "infer", "postprocess", "sink"]


def run_demo(capsys, *argv):
    code = main(["demo", "-q"] + [str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("jetforge: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, mobilenet_onnx, bikes_clip):
    """One 20-frame run with every output, shared by the assertions below."""
    out_dir = tmp_path_factory.mktemp("demo")
    proc = subprocess.run(
        [sys.executable, "-m", "jetforge", "demo", "--app", "classify", "--model", str(mobilenet_onnx), "--video", str(bikes_clip),
         "--max-frames", "20", "--out", str(out_dir), "--threads", "1", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out_dir, json.loads(proc.stdout), proc.stderr


def test_demo_writes_a_readable_annotated_video(demo_run):
    import cv2

    out_dir, metrics, _ = demo_run
    video = out_dir / "annotated.mp4"
    cap = cv2.VideoCapture(str(video))
    frames = []
    while True:
        ok, img = cap.read()
        if not ok:
            break
        frames.append(img)
    cap.release()
    assert len(frames) == 20 and frames[0].shape == (272, 640, 3)
    assert metrics["outputs"]["video"] == [str(video)]
    assert sorted(p.name for p in out_dir.iterdir()) == ["annotated.mp4", "events.jsonl", "fps.png", "latency.png",
                                                         "metrics.json"]


def test_demo_metrics_have_every_figure(demo_run):
    out_dir, metrics, err = demo_run
    assert json.loads((out_dir / "metrics.json").read_text()) == metrics
    assert metrics["frames"] == 20 and metrics["task"] == "classify" and metrics["status"] == "finished"
    assert metrics["fps"] > 0 and metrics["wall_s"] > 0
    e2e = metrics["latency_ms"]["end_to_end"]
    assert metrics["warmup"]["frames"] == 5  # WARMUP_FRAMES: reported apart, out of the latency statistics
    assert e2e["count"] == 15 and 0 < e2e["p50_ms"] <= e2e["p95_ms"] <= e2e["p99_ms"] <= e2e["max_ms"]
    assert metrics["latency_ms"]["frame_to_result"]["count"] == 15
    assert list(metrics["latency_ms"]["stages"]) == STAGES
    for name in STAGES:
        stage = metrics["latency_ms"]["stages"][name]
        assert stage["count"] == 15 and stage["mean_ms"] > 0, name
    assert metrics["memory"]["peak_rss_mib"] > 20 and metrics["memory"]["rss_mib"] > 20
    assert metrics["dropped"]["total"] == 0 and metrics["errors"]["total"] == 0
    backend = metrics["model"]["backend_info"]
    assert backend["backend"] == "onnxruntime" and backend["providers"] == ["CPUExecutionProvider"]
    assert metrics["model"]["backend"].startswith("ONNX Runtime 1.") and metrics["model"]["backend"].endswith(
        "CPUExecutionProvider, 1 thread")
    assert metrics["model"]["model"] == "mobilenet_v2"
    assert metrics["sources"][0]["name"] == "bikes.mp4" and metrics["sources"][0]["frame_count"] == 250
    assert metrics["machine"]["cpu_cores_usable"] >= 1
    assert metrics["results"]["top1_counts"][0] == ["switch", 20]  # the first 20 frames show a light switch


def test_demo_events_have_top5_per_frame(demo_run):
    out_dir, _, _ = demo_run
    events = [json.loads(x) for x in (out_dir / "events.jsonl").read_text().splitlines()]
    assert [e["frame"] for e in events] == list(range(20))
    assert events[1]["t"] == pytest.approx(0.04)
    top = events[0]["top"]
    assert len(top) == 5 and top[0]["label"] == "switch" and top[0]["index"] == 844
    assert all(a["p"] >= b["p"] for a, b in zip(top, top[1:]))


def test_demo_summary_states_the_backend(capsys, tmp_path, mobilenet_onnx, bikes_clip):
    import onnxruntime

    code, out, err = run_demo(capsys, "--app", "classify", "--model", mobilenet_onnx, "--video", bikes_clip,
                              "--max-frames", 3, "--no-video", "--no-plots", "--out", tmp_path, "--threads", 1)
    assert code == 0, err
    assert "ONNX Runtime %s CPUExecutionProvider, 1 thread" % onnxruntime.__version__ in out
    assert "FPS end to end" in out and "p99" in out and "peak RSS" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl", "metrics.json"]


def test_default_demo_is_the_people_showcase(capsys, tmp_path):
    code, out, err = run_demo(capsys, "--max-frames", 3, "--out", tmp_path, "--no-plots")
    assert code == 0, err
    assert "task      people" in out and "SSDLite-MobileNetV2" in out and "walkway" in out and "crossing" in out
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["task"] == "people" and metrics["sources"][0]["name"] == "vtest.avi" and metrics["frames"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["annotated.mp4", "events.jsonl", "metrics.json"]


def test_demo_without_model_uses_the_cached_export(capsys, tmp_path, monkeypatch, mobilenet_onnx):
    import jetforge.workflow.model_refs as model_refs

    monkeypatch.setattr(model_refs, "models_cache_dir", lambda: mobilenet_onnx.parent)
    code, out, err = run_demo(capsys, "--app", "classify", "--max-frames", 2, "--out", tmp_path, "--threads", 1,
                              "--json", "--no-plots")
    assert code == 0, err
    metrics = json.loads(out)
    assert metrics["model"]["path"] == str(mobilenet_onnx) and metrics["sources"][0]["name"] == "bikes.mp4"


def test_demo_with_a_cached_model_never_imports_torch(tmp_path, mobilenet_onnx, bikes_clip):
    code = ("import sys; sys.modules['torch'] = None; sys.modules['torchvision'] = None\n"
            "from jetforge.cli.main import main\n"
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "demo", "-q", "--app", "classify", "--no-plots", "--model", str(mobilenet_onnx), "--video",
                           str(bikes_clip), "--max-frames", "2", "--out", str(tmp_path), "--threads", "1"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "CPUExecutionProvider" in proc.stdout


def test_corrupt_onnx_is_one_line_and_exit_1(capsys, tmp_path, bikes_clip):
    bad = tmp_path / "model.onnx"
    bad.write_text("I am a text file renamed to .onnx\n")
    code, out, err = run_demo(capsys, "--app", "classify", "--model", bad, "--video", bikes_clip, "--out", tmp_path / "o")
    assert code == 1 and out == ""
    assert "model.onnx is a text file, not an ONNX model" in one_error_line(err)
    assert not (tmp_path / "o").exists()


def test_missing_video_is_one_line_and_exit_1(capsys, tmp_path, mobilenet_onnx):
    code, _, err = run_demo(capsys, "--app", "classify", "--model", mobilenet_onnx, "--video", tmp_path / "nope.mp4", "--out", tmp_path)
    assert code == 1
    assert "video file %s does not exist" % (tmp_path / "nope.mp4") in one_error_line(err)


def test_undecodable_video_is_one_line_and_exit_1(capsys, tmp_path, mobilenet_onnx):
    fake = tmp_path / "clip.mp4"
    fake.write_bytes(b"\x00" * 4096)
    code, _, err = run_demo(capsys, "--app", "classify", "--model", mobilenet_onnx, "--video", fake, "--out", tmp_path / "o")
    assert code == 1 and "cannot decode video" in one_error_line(err)


def test_stale_sidecar_is_refused(capsys, tmp_path, mobilenet_onnx, bikes_clip):
    model = tmp_path / "m.onnx"
    shutil.copy(mobilenet_onnx, model)
    data = json.loads(sidecar_path(mobilenet_onnx).read_text())
    data["content_sha256"] = "f" * 64
    sidecar_path(model).write_text(json.dumps(data))
    code, _, err = run_demo(capsys, "--app", "classify", "--model", model, "--video", bikes_clip, "--out", tmp_path / "o")
    assert code == 1 and "does not belong to m.onnx" in one_error_line(err)


def test_bad_options_are_one_line(capsys, tmp_path, bikes_clip):
    code, _, err = run_demo(capsys, "--video", bikes_clip, "--max-frames", 0, "--out", tmp_path)
    assert code == 1 and "argument --max-frames: 0 is out of range (allowed: 1 or more)" in one_error_line(err)


def test_cached_export_is_reused_and_redone_when_stale(tmp_path, mobilenet_onnx):
    from jetforge.workflow.model_refs import ensure_default_model

    path, exported = ensure_default_model(mobilenet_onnx.parent)
    assert path == mobilenet_onnx and exported is False
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(mobilenet_onnx, models / mobilenet_onnx.name)
    shutil.copy(sidecar_path(mobilenet_onnx), models / sidecar_path(mobilenet_onnx).name)
    with open(models / mobilenet_onnx.name, "ab") as f:
        f.write(b"\x00")  # the model changed after its sidecar was written
    pytest.importorskip("torch")
    path, exported = ensure_default_model(models)
    assert exported is True and path.read_bytes() == mobilenet_onnx.read_bytes()


def test_classify_head_matches_numpy():
    logits = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    head = ClassifyHead(["c%d" % i for i in range(1000)], top_k=5)
    preds = head(logits)
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    order = np.argsort(-probs)[:5]
    assert [p.index for p in preds] == order.tolist()
    assert [p.label for p in preds] == ["c%d" % i for i in order]
    np.testing.assert_allclose([p.prob for p in preds], probs[order], rtol=1e-5)
    tied = np.zeros(1000, np.float32)
    tied[[907, 3, 600, 5, 2, 41, 7]] = [6.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]  # six equal logits for four places
    # ties keep the lower class index first, on every CPU (a partial sort's pick among ties is per instruction set)
    assert [p.index for p in head(tied)] == [907, 2, 3, 5, 7]
    assert softmax(np.array([0.0, 0.0])).tolist() == [0.5, 0.5]
    assert ClassifyHead([], top_k=2)(np.array([1.0, 3.0]))[0].label == "class 1"


def test_overlay_draws_labels_and_the_model_crop(bikes_frames):
    from jetforge.apps.tasks.classify import Prediction

    image = bikes_frames[5].copy()
    draw_overlay(image, [Prediction(844, "switch", 0.94)], 120.0, "ONNX Runtime", IMAGENET_TORCHVISION)
    changed = np.any(image != bikes_frames[5], axis=2)
    assert changed[:30, :100].any() and changed[-20:, :].any()  # labels (top left), status bar (bottom)
    x0 = int(round(189 * 640 / 602))  # left edge of the centre crop the model sees
    assert changed[100:200, x0].all() and not changed[100:200, x0 + 20].any()
