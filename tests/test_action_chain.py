"""A small 3-D action model through the whole chain, as issue 17's "done when" asks, in one test.

prune (``jetforge prune``, CLI) -> distil from the unpruned model (``jetforge.compress.distill``'s KD loss through
the action recipe's trainer; Python, as ``jetforge distill`` has no clip recipe) -> QAT (``jetforge.compress.qat``:
3-D fake quantization, a few KD steps; Python, as ``jetforge qat`` runs only its Fashion-MNIST recipe) -> Q/DQ
export -> ``jetforge qat --translate`` (plain ONNX + DLA cache from the trained scales, CLI) -> calibrate from real
clips with a held-out INT8 evaluation (``jetforge calibrate --clips sliding``, CLI) -> Q/DQ parse and build in
TensorRT-RTX (skipped without it) -> ``jetforge dla-check`` (and ``--fold-time``) -> ``jetforge bundle create`` ->
``jetforge app action`` on vtest.avi with the bundle's model.

The model is jetforge's 3-D MobileNetV2 over 8-frame 32x32 RGB clips: ImageNet MobileNetV2 weights inflated to
3-D (real features, so the logits and their INT8 agreement mean something) under a random 4-class head, a few
training steps at each stage: the chain is what is tested, not accuracy.  Real parts everywhere: OpenCV decodes
the clip, ONNX Runtime runs the models, TensorRT-RTX parses and builds; the DLA placement is dla-check's
prediction (no Jetson here).
"""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from jetforge.assets import asset_path  # noqa: E402
from jetforge.cli.main import main  # noqa: E402
from jetforge.fileio import sha256_file  # noqa: E402
from jetforge.runtime.inputs.clip import ClipContract  # noqa: E402

pytestmark = pytest.mark.slow

LABELS = ["walking left", "walking right", "moving, no lateral motion", "standing still"]
CONTRACT = ClipContract(window=8, crop_height=32, crop_width=32, margin=1.25, color="rgb", fps_trained=10.0,
                        stride_trained=4)
TRAIN_FRAMES = "@0:400"      # distillation and calibration clips
HELD_OUT = "@430:"           # evaluation clips: a guard of 30 frames (more than one 8-frame clip) in between


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, (argv[0], err[-3000:], out[-2000:])
    return out


def _cli_json(capsys, *argv):
    return json.loads(_cli(capsys, *argv, "--json"))


def _clips(video: Path, frames: str, count: int) -> np.ndarray:
    """Sliding-window clips of the real video under the model's contract (calibration's own clip source)."""
    from jetforge.calibrate.clips.sources import collect_clip_sources

    samples = collect_clip_sources([str(video) + frames], CONTRACT, max_clips=count)
    clips = np.stack([sample.tensor for _name, sample in samples])
    assert clips.shape == (count, 3, 8, 32, 32) and clips.dtype == np.float32
    return clips


def _export(model, path: Path, name: str) -> Path:
    from jetforge.compress.export import export_onnx

    export_onnx(model.cpu().eval(), path, (1,) + tuple(CONTRACT.input_shape), task="action", model_name=name,
                labels=LABELS, input_name="clip", output_name="logits", extra={"clip": CONTRACT.to_dict()})
    return path


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"clip": x})[0]


def _teacher():
    """ImageNet MobileNetV2 inflated to 3-D with a random 4-class head scaled so the logits are O(1)."""
    from jetforge.compress.models.mobilenet3d import mobilenet3d_inflated

    torch.manual_seed(0)
    teacher = mobilenet3d_inflated(len(LABELS)).eval()
    with torch.no_grad():
        teacher.classifier[1].weight.normal_(0.0, 0.3)
    return teacher


def _prune(tmp_path: Path, capsys):
    """The unpruned teacher (a user's whole pickled module) pruned by the CLI; the student rebuilt from its state."""
    from jetforge.compress.models.mobilenet3d import mobilenet3d_from_state

    teacher = _teacher()
    torch.save(teacher, str(tmp_path / "teacher.pt"))
    report = _cli_json(capsys, "prune", "--model", tmp_path / "teacher.pt", "--trust-pickle", "--flops-reduction", 2,
                       "--input-shape", "1x3x8x32x32", "--out", tmp_path / "pruned", "--no-plot", "--no-onnx")
    totals = report["totals"]
    assert totals["macs_before"] / totals["macs_after"] >= 1.9     # goal 2x, met within the channel rounding
    state = torch.load(str(tmp_path / "pruned" / "pruned.pt"), map_location="cpu", weights_only=True)
    student = mobilenet3d_from_state(state).eval()
    assert sum(p.numel() for p in student.parameters()) < sum(p.numel() for p in teacher.parameters())
    return teacher, student, totals


def _kd_divergence(teacher, student, x) -> float:
    with torch.no_grad():
        return float(torch.nn.functional.kl_div(torch.log_softmax(student(x) / 4.0, 1),
                                                torch.softmax(teacher(x) / 4.0, 1), reduction="batchmean"))


def _distill(teacher, student, clips: np.ndarray):
    """Four epochs of pure logit distillation (kd_weight 1) on real clips: the student must move toward the teacher
    (its KL divergence from the teacher on these clips, in eval mode, falls).

    12 steps are few, so the outcome is sensitive to float rounding: with the former 2 epochs at lr 0.003 the ratio
    after/before was 0.76 with 1 torch thread and 1.007 (a failure) with 3. At 4 epochs and lr 0.001 it was
    0.28-0.48 over torch threads 1, 2, 3 and 4 and over a baseline-ISA run (ATEN_CPU_CAPABILITY=default,
    ONEDNN_MAX_CPU_ISA=SSE41, MKL_ENABLE_INSTRUCTIONS=SSE4_2): a margin of 2x for other CPUs' kernels."""
    from jetforge.compress.action.action3d import TrainSettings, train_clip_classifier

    x = torch.from_numpy(clips)
    with torch.no_grad():
        y = teacher(x).argmax(1)
    before = _kd_divergence(teacher, student.eval(), x)
    train_clip_classifier(student, x, y, LABELS, TrainSettings(epochs=4, batch_size=8, lr=0.001),
                          torch.device("cpu"), teacher=teacher, kd_weight=1.0, temperature=4.0)
    after = _kd_divergence(teacher, student.eval(), x)
    assert after < before, (before, after)
    return student.eval()


def _qat(teacher, student, clips: np.ndarray, out: Path):
    """3-D QAT of the distilled student: entropy-calibrated ranges, one KD epoch with fake quantization, Q/DQ
    export with the clip sidecar."""
    from jetforge.compress.qat import calibrate_qat, export_qdq_onnx, prepare_qat, set_quantization

    x = torch.from_numpy(clips)
    q = prepare_qat(student)
    calibrate_qat(q, [x[i:i + 8] for i in range(0, len(x), 8)], "entropy")
    with torch.no_grad():
        target = torch.softmax(teacher(x) / 4.0, 1)
    opt = torch.optim.AdamW(q.parameters(), lr=1e-4)
    q.train()
    for _epoch in range(1):
        for i in range(0, len(x), 8):
            loss = torch.nn.functional.kl_div(torch.log_softmax(q(x[i:i + 8]) / 4.0, 1), target[i:i + 8],
                                              reduction="batchmean")
            opt.zero_grad()
            loss.backward()
            opt.step()
    q.eval()
    export = export_qdq_onnx(q, out, (1,) + tuple(CONTRACT.input_shape), labels=LABELS, model_name="action_chain_qat",
                             task="action", input_name="clip", output_name="logits", extra={"clip": CONTRACT.to_dict()})
    assert export.quantize_nodes > 50 and export.per_channel_weights > 20
    set_quantization(q, False)   # the same network without fake quantization: what the plain ONNX must compute
    with torch.no_grad():
        float_logits = q(x[:4]).numpy()
    return out, float_logits


def _translate(qdq: Path, out: Path, capsys):
    """``jetforge qat --translate``: the plain ONNX (with a sidecar carrying the clip contract and labels, as the
    bundle and the app need) + the cache holding the trained scales (DLA takes INT8 only from a cache)."""
    from jetforge.runtime.sidecar import read_sidecar

    report = _cli_json(capsys, "qat", "--translate", qdq, "--trt", "10.3", "--out", out)
    plain, cache = out / "qat.plain.onnx", out / "qat.calib"
    assert plain.is_file() and cache.is_file() and report["trained_scales"] > 20
    side = read_sidecar(plain)          # the content hash is checked: the sidecar belongs to the written file
    assert side.task == "action" and side.labels == LABELS and side.input == CONTRACT
    return plain, cache


def test_small_3d_model_through_the_whole_chain(tmp_path, capsys):
    video = asset_path("opencv_samples", "vtest.avi")
    teacher, student, _macs = _prune(tmp_path, capsys)
    train_clips = _clips(video, TRAIN_FRAMES, 24)
    student = _distill(teacher, student, train_clips)

    qat_qdq, float_logits = _qat(teacher, student, train_clips, tmp_path / "qat.qdq.onnx")
    model, qat_cache = _translate(qat_qdq, tmp_path / "dla", capsys)
    # the plain model is the QAT network with its BatchNorms folded into the weights: one float32 rounding per
    # folded weight and ONNX Runtime's summation order; independent roundings add like a random walk, about
    # sqrt(52 convolutions) * sqrt(K <= 960) * 2**-24 = 1.4e-5 of the logits' scale; 1e-4 leaves 7x (seen when
    # written: 1.2e-5 at a scale of 5.7, i.e. 2e-6)
    got = _ort(model, train_clips[:4])
    assert np.abs(got - float_logits).max() <= 1e-4 * np.abs(float_logits).max() + 1e-6

    # calibrate from real clips: training frames for calibration, later frames held out for the INT8 evaluation
    cal = _cli_json(capsys, "calibrate", model, "--data", str(video) + TRAIN_FRAMES, "--eval", str(video) + HELD_OUT,
                    "--clips", "sliding", "--samples", 16, "--no-plots")
    calib_qdq = Path(cal["qdq_onnx"])
    assert Path(cal["cache"]).is_file() and calib_qdq.is_file() and cal["samples"] == 16
    held_out = cal["evaluation"]["int8"]["metrics"]["clip_accuracy"]   # INT8 (simulated) vs FP32 on held-out clips
    assert held_out["clips"] > 20 and 0.0 <= held_out["agreement_ci_low"] <= held_out["agreement"] <= 1.0

    for qdq in (qat_qdq, calib_qdq):
        _rtx_parse_and_build(qdq)
    _dla(model, qat_cache, tmp_path, capsys)

    bundle = tmp_path / "bundle"
    _cli_json(capsys, "bundle", "create", model, "--target", "orin-nx-16gb", "--out", bundle, "--calib", qat_cache,
              "--qdq", qat_qdq)
    assert sha256_file(bundle / "model.onnx") == sha256_file(model)
    _app(bundle / "model.onnx", tmp_path / "app", capsys)


def _rtx_parse_and_build(qdq: Path) -> None:
    try:
        import tensorrt_rtx  # noqa: F401
    except ImportError:
        warnings.warn("TensorRT-RTX is not installed: the Q/DQ parse and build step of the chain was skipped")
        return
    from jetforge.runtime.tensorrt import check_onnx_builds

    build = check_onnx_builds(qdq, prefer="tensorrt_rtx", input_shapes={"clip": [1, 3, 8, 32, 32]})
    assert build.library == "tensorrt_rtx" and build.outputs == ["logits"] and build.serialized_bytes > 10_000


def _dla(model: Path, calib: Path, tmp_path: Path, capsys) -> None:
    dla = _cli_json(capsys, "dla-check", model, "--target", "orin-nx-16gb", "--precision", "int8", "--calib", calib)
    summary = dla["summary"]
    # every layer on 5-D clip tensors is GPU-only (DLA is 2D only): only the classifier head runs on the DLA
    assert summary["dla_flops_share"] < 0.01 and summary["gpu_layers"] > 50
    assert summary["transitions"]["count"] == 2 * summary["dla_subgraphs"]
    folded = tmp_path / "action.folded.onnx"
    after = _cli_json(capsys, "dla-check", model, "--target", "orin-nx-16gb", "--fold-time", folded)
    assert after["summary"]["dla_flops_share"] > summary["dla_flops_share"] and folded.is_file()
    assert after["summary"]["dla_subgraphs"] <= 16


def _app(model: Path, out: Path, capsys) -> None:
    _cli(capsys, "app", "action", "-q", "--model", model, "--detector", "hog", "--max-frames", 40, "--stride", 1,
         "--top-k", len(LABELS), "--no-video", "--no-plots", "--out", out)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"]["action_model"] == str(model) and metrics["model"]["window"] == CONTRACT.window
    records = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    tracks = [t for r in records for t in r.get("tracks", []) if t.get("top")]
    assert sum(r.get("windows_classified", 0) for r in records) > 0 and tracks
    for t in tracks:
        # the track's probabilities over the model's four classes (softmax averaged over windows; rounded to 1e-4)
        assert t["action"] == t["top"][0]["label"] and sorted(c["label"] for c in t["top"]) == sorted(LABELS)
        assert abs(sum(c["p"] for c in t["top"]) - 1.0) <= 5e-4
