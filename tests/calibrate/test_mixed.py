"""Automatic mixed precision (chosen on one split, reported on another), held-out checks, --retarget's output path."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from jetforge.cli.main import main  # noqa: E402
from jetforge.calibrate import algorithms, evaluate as ev, mixed, stats  # noqa: E402
from jetforge.calibrate.cache.format import CalibrationCache  # noqa: E402
from jetforge.calibrate.qdq.export import insert_qdq  # noqa: E402
from jetforge.errors import CalibrationError  # noqa: E402

cv2 = pytest.importorskip("cv2")


def _diverse_net(path, x):
    """A small conv net whose logits are standardised over real frames ``x``, so its top-1 varies by image.

    (The shared tiny test net predicts one class for every frame, which makes agreement trivially 1.)
    """
    torch = pytest.importorskip("torch")
    import warnings
    from torch import nn

    torch.manual_seed(3)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                        nn.ReLU(), nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(32, 10)).eval()
    with torch.no_grad():
        logits = net(torch.from_numpy(x))
        mean, std = logits.mean(0), logits.std(0) + 1e-6
        net[-1].weight.div_(std[:, None])
        net[-1].bias.sub_(mean).div_(std)
        net[-1].weight.mul_(4.0)
        net[-1].bias.mul_(4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.from_numpy(x[:1]), str(path), input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, opset_version=13, dynamo=False)
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory, real_frames):
    from jetforge.runtime.inputs import Preprocess
    from tests.calibrate.conftest import MODEL_SIZE

    pre = Preprocess(height=MODEL_SIZE, width=MODEL_SIZE)
    x = np.stack([pre.apply(f) for f in real_frames])
    batches = [x[i:i + 8] for i in range(0, len(x), 8)]
    m = onnx.load(str(_diverse_net(tmp_path_factory.mktemp("mixed") / "net.onnx", x)))
    st = stats.collect_from_batches(m, batches, tensors="qdq")
    # ranges cut to a third clip hard, so that the search has INT8 error to remove
    amax = algorithms.compute_all(st.histograms, "entropy")
    q = insert_qdq(m, {k: v / 3 for k, v in amax.items()})
    evaluator = ev.Evaluator(m, batches)
    assert len(set(evaluator.reference.argmax(axis=1))) >= 4
    return m, q, evaluator


def _order(res):
    return [s.name for s in res.sensitivity] + [n for n in res.int8_layers if n not in
                                                [s.name for s in res.sensitivity]]


def _brute_force_curve(q, order, evaluator, metric="agreement"):
    """Metric of every k (0..all layers FP16), each from a fresh evaluation: the independent reference."""
    return [mixed.metric_value(evaluator.evaluate(ev.dequantize_layers(q, order[:k]) if k else q), metric)
            for k in range(len(order) + 1)]


def test_split_is_deterministic_disjoint_and_made_of_contiguous_blocks():
    for n in (2, 3, 9, 10, 24, 101, 300):
        a, b = mixed.split_samples(n), mixed.split_samples(n)
        assert a.selection == b.selection and a.report == b.report          # deterministic
        assert not set(a.selection) & set(a.report)                         # disjoint
        assert sorted(a.selection + a.report) == list(range(n))             # every sample, once
        assert a.selection and a.report
        # contiguous runs: at most 10 blocks, so at most 9 places where the split changes
        side = [0 if i in set(a.selection) else 1 for i in range(n)]
        assert sum(side[i] != side[i + 1] for i in range(n - 1)) <= 9
        # about half each: the blocks differ in size by at most one sample
        assert abs(len(a.selection) - len(a.report)) <= -(-n // 10)
    with pytest.raises(CalibrationError, match="at least 2 evaluation samples"):
        mixed.split_samples(1)


def test_split_evaluators_hold_the_samples_of_their_split(setup):
    m, q, evaluator = setup
    split = mixed.split_samples(evaluator.samples)
    labels = np.arange(evaluator.samples) % 10
    labelled = ev.Evaluator(m, evaluator.batches, labels=labels)
    sel, rep = mixed.split_evaluator(labelled, split)
    assert sel.samples == len(split.selection) and rep.samples == len(split.report)
    x = np.concatenate(evaluator.batches)
    assert np.array_equal(np.concatenate(sel.batches), x[split.selection])
    assert np.array_equal(np.concatenate(rep.batches), x[split.report])
    assert np.array_equal(rep.labels, labels[split.report])
    # FP32 outputs of a sample do not depend on which batch it sits in (float kernels; tolerance for blocking)
    np.testing.assert_allclose(rep.reference, evaluator.reference[split.report], rtol=1e-4, atol=1e-5)


def test_bound_already_met_keeps_everything_int8(setup):
    m, q, evaluator = setup
    res = mixed.search(m, q, evaluator, 0.05, "agreement")
    assert res.met and res.fp16_layers == [] and res.layer_precisions == ""
    assert res.int8_layers == [layer.name for layer in ev.quantized_layers(q)]
    first = res.curve[0]
    assert first == {"fp16_layers": 0, "selection": round(res.result.agreement, 4), "selection_met": True,
                     "used_to_choose": True}
    # only k = 0 decided; the rest of the curve (the next points and all-FP16) is for the plot
    assert [r["fp16_layers"] for r in res.curve if r["used_to_choose"]] == [0]
    assert res.curve[-1]["fp16_layers"] == len(res.int8_layers)


def test_the_choice_is_the_smallest_k_meeting_the_bound_whatever_the_curve(setup):
    """Against brute force over every k: the search returns min{k : value(k) meets the bound} for every bound
    the curve can produce, including bounds that a bisection over a non-monotone curve would get wrong
    (on this data agreement drops from k = 0 to k = 1)."""
    m, q, evaluator = setup
    first = mixed.search(m, q, evaluator, 1.0, "agreement", method="sqnr")
    order = _order(first)
    values = _brute_force_curve(q, order, evaluator)
    for bound in sorted(set(values)):
        res = mixed.search(m, q, evaluator, bound, "agreement", sensitivity=first.sensitivity)
        want = min(k for k, v in enumerate(values) if v >= bound - 1e-12)
        assert res.met and len(res.fp16_layers) == want, (bound, values)
        assert res.fp16_layers == order[:want]
        # every k up to the choice was measured, in order, and every smaller one failed
        chose = [r for r in res.curve if r["used_to_choose"]]
        assert [r["fp16_layers"] for r in chose] == list(range(want + 1))
        assert [r["selection_met"] for r in chose] == [False] * want + [True]
        assert all(r["selection"] == pytest.approx(values[r["fp16_layers"]], abs=1e-4) for r in res.curve)


def test_unreachable_bound_returns_the_best_measured_and_says_so(setup):
    m, q, evaluator = setup
    first = mixed.search(m, q, evaluator, 1.0, "agreement")
    values = _brute_force_curve(q, _order(first), evaluator)
    res = mixed.search(m, q, evaluator, 1.0, "agreement", sensitivity=first.sensitivity, max_fp16=1)
    if max(values[:2]) >= 1.0:
        assert res.met
    else:
        best = max(range(2), key=lambda k: (values[k], -k))
        assert not res.met and len(res.fp16_layers) == best


def test_report_split_is_measured_at_every_point_and_never_chooses(setup, tmp_path):
    m, q, evaluator = setup
    split = mixed.split_samples(evaluator.samples)
    sel, rep = mixed.split_evaluator(evaluator, split)
    alone = mixed.search(m, q, sel, 1.0, "agreement")
    res = mixed.search(m, q, sel, 1.0, "agreement", report_evaluator=rep)
    res.split = split
    # the report split changes nothing about the choice
    assert res.fp16_layers == alone.fp16_layers and res.met == alone.met
    assert all("report" in r for r in res.curve)
    # its numbers are those of the chosen model on those samples, measured independently
    chosen = rep.evaluate(res.model)
    assert res.report_result.agreement == pytest.approx(chosen.agreement, abs=1e-12)
    assert res.report_met == (chosen.agreement >= 1.0 - 1e-12)
    assert res.report_int8_result.agreement == pytest.approx(rep.evaluate(q).agreement, abs=1e-12)
    d = res.to_dict()
    assert d["selection"]["samples"] == len(split.selection) and d["report"]["samples"] == len(split.report)
    assert d["report"]["note"].startswith("not used to choose") and d["split"]["rule"] == mixed.SPLIT_RULE
    assert d["split"]["selection_samples"] + d["split"]["report_samples"] == evaluator.samples
    written = mixed.write_outputs(res, tmp_path / "m.precisions.json", tmp_path / "m.mixed.qdq.onnx",
                                  tmp_path / "m.precisions.txt", tmp_path / "m.precisions.png")
    png = cv2.imread(str(written["plot"]))
    assert png is not None and png.shape[0] > 200 and png.shape[1] > 400
    data = json.loads(written["json"].read_text())
    assert data["curve"] == res.curve and data["fp16_layers"] == res.fp16_layers and data["format"] == 2


def test_exact_bound_needs_fp16_layers_in_sensitivity_order(setup, tmp_path):
    m, q, evaluator = setup
    res = mixed.search(m, q, evaluator, 1.0, "agreement", method="sqnr")
    assert res.met and res.result.agreement == 1.0
    order = [s.name for s in res.sensitivity]
    assert res.fp16_layers == order[:len(res.fp16_layers)] and res.fp16_layers
    # the smallest such prefix: one layer fewer does not meet the bound (it was measured)
    k = len(res.fp16_layers)
    fewer = evaluator.evaluate(ev.dequantize_layers(q, order[:k - 1]) if k > 1 else q)
    assert fewer.agreement < 1.0
    # the mixed model has no Q/DQ on the FP16 layers, and every other layer keeps them
    left = {layer.name for layer in ev.quantized_layers(res.model)}
    assert left == set(res.int8_layers) and not left & set(res.fp16_layers)
    written = mixed.write_outputs(res, tmp_path / "m.precisions.json", tmp_path / "m.mixed.qdq.onnx",
                                  tmp_path / "m.precisions.txt")
    data = json.loads(written["json"].read_text())
    assert data["fp16_layers"] == res.fp16_layers and data["met"] and data["metric"] == "agreement"
    assert data["trtexec"]["layerPrecisions"] == ",".join(n + ":fp16" for n in res.fp16_layers)
    assert "--precisionConstraints=obey" in data["trtexec"]["flags"]
    assert written["layers"].read_text().splitlines() == [n + ":fp16" for n in res.fp16_layers]
    assert data["report"] is None and "plot" not in written  # no report split given, no plot asked for
    reloaded = onnx.load(str(written["qdq"]))
    onnx.checker.check_model(reloaded)
    assert evaluator.evaluate(reloaded).agreement == 1.0


def test_forced_layers_and_errors(setup):
    m, q, evaluator = setup
    gemm = [layer.name for layer in ev.quantized_layers(q) if layer.op == "Gemm"][-1]
    res = mixed.search(m, q, evaluator, 0.05, "agreement", always_fp16=[gemm])
    assert res.fp16_layers == [gemm]
    with pytest.raises(CalibrationError, match="needs labelled"):
        mixed.search(m, q, evaluator, 0.01, "accuracy_drop")
    with pytest.raises(CalibrationError, match=r"in \(0, 1\]"):
        mixed.search(m, q, evaluator, 98.0, "agreement")
    with pytest.raises(CalibrationError, match="not a quantized layer"):
        mixed.search(m, q, evaluator, 0.5, "agreement", always_fp16=["nope"])


def test_accuracy_drop_bound_with_labels(setup):
    m, q, evaluator = setup
    labelled = ev.Evaluator(m, evaluator.batches, labels=evaluator.reference.argmax(axis=1))
    res = mixed.search(m, q, labelled, 0.0, "accuracy_drop")
    assert res.met and res.result.accuracy_drop <= 0.0 and res.result.accuracy_fp32 == 1.0


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_mixed_precision_chooses_on_one_split_and_reports_on_the_other(tiny_model, image_dir, bikes_video,
                                                                           capsys):
    argv = ["calibrate", str(tiny_model), "--data", str(image_dir), "--eval", str(bikes_video), "--eval-samples", "24",
            "--samples", "24", "--no-plots", "--mixed-precision", "1.0", "--mixed-metric", "agreement"]
    code, out, err = _run(capsys, argv + ["--json"])
    assert code == 0, err
    data = json.loads(out)
    base = tiny_model.parent
    ev_block = data["evaluation"]
    frames = int(cv2.VideoCapture(str(bikes_video)).get(cv2.CAP_PROP_FRAME_COUNT))
    assert ev_block["int8"]["samples"] == 24 and ev_block["samples"] == {"used": 24, "available": frames,
                                                                          "limit": "--eval-samples 24"}
    mp = ev_block["mixed_precision"]
    assert mp["split"]["selection_samples"] == 12 and mp["split"]["report_samples"] == 12
    assert mp["met"] and mp["selection"]["chosen"]["agreement"] == 1.0 and mp["selection"]["meets_bound"]
    assert mp["report"]["samples"] == 12 and mp["report"]["value"] == mp["report"]["chosen"]["agreement"]
    k = len(mp["fp16_layers"])
    assert [r["fp16_layers"] for r in mp["curve"] if r["used_to_choose"]] == list(range(k + 1))
    assert all("report" in r for r in mp["curve"])
    assert data["mixed_qdq_onnx"] == str(base / "tiny.mixed.qdq.onnx") and (base / "tiny.mixed.qdq.onnx").is_file()
    assert not (base / "tiny.precisions.png").exists()  # --no-plots
    precisions = json.loads((base / "tiny.precisions.json").read_text())
    assert precisions["fp16_layers"] == mp["fp16_layers"] and precisions["curve"] == mp["curve"]
    report = json.loads((base / "tiny.calib.json").read_text())
    assert report["evaluation"]["mixed_precision"]["fp16_layers"] == mp["fp16_layers"]
    assert report["evaluation"]["sensitivity"] and "sqnr_db" in report["evaluation"]["sensitivity"][0]
    from jetforge.runtime.sidecar import read_sidecar

    assert read_sidecar(base / "tiny.mixed.qdq.onnx").extra["fp16_layers"] == mp["fp16_layers"]
    # the text says which split every mixed-precision number is on, and the plot is written with plots on
    code, out, err = _run(capsys, [a for a in argv if a != "--no-plots"])
    assert code == 0, err
    assert "selection split (12 samples, chose the layers)" in out
    assert "report split (12 other samples, not used to choose)" in out
    assert "mixed, report split vs FP32 on 12 samples" in out
    assert cv2.imread(str(base / "tiny.precisions.png")) is not None


def test_cli_near_duplicates_between_calibration_and_evaluation_are_reported(tiny_model, image_dir, bikes_video,
                                                                            capsys):
    """image_dir holds every 7th frame of bikes.mp4: evaluating on that clip is not held-out, whatever the paths."""
    code, out, err = _run(capsys, ["calibrate", str(tiny_model), "--data", str(image_dir), "--eval", str(bikes_video),
                                   "--samples", "24", "--no-plots", "--json"])
    assert code == 0, err
    block = json.loads(out)["evaluation"]
    check = block["held_out_check"]
    assert check["paths_disjoint"] and not block["held_out"]
    dup = check["near_duplicates"]
    assert dup["compared"] == block["samples"]["used"] == block["samples"]["available"]  # every frame by default
    assert dup["against"] == 24 and 0 < dup["with_near_duplicate"] <= dup["compared"]
    assert dup["examples"][0]["evaluation"].startswith(str(bikes_video) + "#")
    assert any("near-duplicate in the calibration set" in w for w in json.loads(out)["warnings"])
    code, out, err = _run(capsys, ["calibrate", str(tiny_model), "--data", str(image_dir), "--eval", str(bikes_video),
                                   "--samples", "24", "--eval-samples", "30", "--no-plots"])
    assert code == 0, err
    assert "evaluation samples: 30 of" in out and "NOT held out:" in out


def test_cli_eval_text_and_labels(tiny_model, image_dir, tmp_path, capsys):
    labels = tmp_path / "labels.txt"
    labels.write_text("".join("img_%03d.jpg\tc%d\n" % (i, i % 10) for i in range(40)))
    code, out, err = _run(capsys, ["calibrate", str(tiny_model), "--data", str(image_dir), "--eval", str(image_dir),
                                   "--labels", str(labels), "--samples", "16", "--no-plots"])
    assert code == 0, err
    assert "evaluation samples: 40 of 40 available (all)" in out
    assert "INT8 vs FP32 on 40 samples: top-1 agreement" in out and "accuracy on 40 labelled: FP32" in out
    report = json.loads((tiny_model.parent / "tiny.calib.json").read_text())
    assert not report["evaluation"]["held_out"] and report["evaluation"]["int8"]["labelled"] == 40


@pytest.mark.parametrize("argv, message", [
    (["--labels", "x.txt"], "--labels needs --eval"),
    (["--eval", "{data}", "--mixed-precision", "0.01", "--mixed-metric", "accuracy_drop"], "needs labelled"),
    (["--eval", "{data}", "--no-qdq"], "--no-qdq"),
    (["--mixed-precision", "98"], "agreement in (0, 1]"),
])
def test_cli_bad_evaluation_options_one_line(tiny_model, image_dir, capsys, argv, message):
    argv = [a.replace("{data}", str(image_dir)) for a in argv]
    code, out, err = _run(capsys, ["calibrate", str(tiny_model), "--data", str(image_dir), "--samples", "16"] + argv)
    assert code == 1 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tiny_model.parent / "tiny.calib").exists()  # refused before any slow step


def test_retarget_without_out_never_overwrites_the_input(tmp_path, capsys):
    original = CalibrationCache.from_amax({"input": 2.5, "conv": 1.0}, "10.3")
    path = original.write(tmp_path / "model.calib")
    before = path.read_bytes()
    code, out, err = _run(capsys, ["calibrate", "--check-cache", str(path), "--trt", "8.6.2", "--retarget"])
    assert code == 0, err
    assert path.read_bytes() == before
    target = tmp_path / "model.trt8.6.2.calib"
    retargeted = CalibrationCache.read(target)
    assert retargeted.header == "TRT-8602-EntropyCalibration2" and retargeted.scales == original.scales
    assert str(target) in out
    # and an explicit --out naming the input is refused
    code, out, err = _run(capsys, ["calibrate", "--check-cache", str(path), "--trt", "8.5.2", "--retarget",
                                   "--out", str(path)])
    assert code == 1 and "also an input" in err and path.read_bytes() == before


# ----------------------------------------------------------------- few confident samples (issue 25)
def _max_calibrated(m, evaluator):
    st = stats.collect_from_batches(m, evaluator.batches, tensors="qdq")
    return insert_qdq(m, algorithms.compute_all(st.histograms, "max"))


def test_too_few_confident_samples_report_the_metric_the_bound_was_applied_to(setup):
    """With fewer confident samples than ``min_confident`` the bound is applied to top-1 agreement over all
    samples: the result, its JSON and the printed lines name ``agreement`` and why, never
    ``agreement_confident`` with agreement's numbers."""
    from jetforge.calibrate.calibrate_model import evaluation_summary

    m, q, evaluator = setup
    int8 = evaluator.evaluate(q)
    assert int8.agreement_confident < 0.5 and 0 < int8.confident_samples  # all INT8 misses 0.5 on both metrics
    res = mixed.search(m, q, evaluator, 0.5, "agreement_confident", min_confident=int8.confident_samples + 1)
    assert res.metric == "agreement_confident" and res.metric_used == "agreement"
    d = res.to_dict()
    assert d["metric_used"] == "agreement" and "%d confident" % int8.confident_samples in d["metric_note"]
    assert d["selection"]["value"] == round(res.result.agreement, 4)
    assert d["selection"]["meets_bound"] == (res.result.agreement >= 0.5)
    assert all(r["selection"] == round(evaluator.evaluate(
        ev.dequantize_layers(q, _order(res)[:r["fp16_layers"]]) if r["fp16_layers"] else q).agreement, 4)
        for r in res.curve[:2])
    block = {k: v for k, v in d.items() if k not in ("sensitivity", "format")}
    text = "\n".join(evaluation_summary({"mixed_precision": block}))
    assert "agreement >= 0.5" in text and "agreement_confident >=" not in text
    assert "%d confident" % int8.confident_samples in text


def test_all_int8_meeting_the_requested_bound_keeps_every_layer_int8(setup):
    """All INT8 at 1.000 on the confident samples meets an agreement_confident bound of 0.98: no FP16 layer is
    added because there are too few confident samples for the usual rule (the reported run kept 60 of 63)."""
    m, _, evaluator = setup
    q = _max_calibrated(m, evaluator)
    int8 = evaluator.evaluate(q)
    assert int8.agreement_confident == 1.0 and int8.agreement < 0.98  # plain agreement would need FP16 layers
    few = int8.confident_samples + 1
    res = mixed.search(m, q, evaluator, 0.98, "agreement_confident", min_confident=few)
    assert res.met and res.fp16_layers == [] and res.metric_used == "agreement_confident"
    assert "%d confident" % int8.confident_samples in res.metric_note
    d = res.to_dict()
    assert d["selection"]["value"] == 1.0 and d["selection"]["meets_bound"]
    assert d["curve"][0] == {"fp16_layers": 0, "selection": 1.0, "selection_met": True, "used_to_choose": True}
    # with enough confident samples nothing changes: the same bound, the usual rule, the same answer
    usual = mixed.search(m, q, evaluator, 0.98, "agreement_confident", sensitivity=res.sensitivity)
    assert usual.fp16_layers == [] and usual.metric_used == "agreement_confident" and usual.metric_note == ""
