"""Calibration and simulated-INT8 evaluation of a clip model from real video (vtest.avi): clips cut under the model's
clip contract (sliding windows, per-track windows along the CNN detector's tracks), the same statistics, algorithms,
cache, Q/DQ and report as images, the ``clip_accuracy`` metric, held-out clips, and the CLI's errors.

The model is a tiny 3D CNN (Conv3d, BatchNorm3d, a depthwise Conv3d, 3D average pooling) exported by jetforge with a
``clip`` sidecar (grey (T, H, W) clips, as the bundled action model takes them; the net adds the channel axis).
Every number is checked against an independent computation: frames decoded by OpenCV here, crops made with numpy
slicing and cv2.resize, activations from a plain ONNX Runtime session, amax/percentiles/histograms with numpy.
"""

import json
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from jetforge.calibrate.clips.calibration import ClipOptions, gather_clips  # noqa: E402
from jetforge.calibrate.clips.sources import (ClipVideo, collect_clip_sources, parse_video_range,  # noqa: E402
                                             replay_tracks, split_shared_videos, whole_frame_region)
from jetforge.calibrate.metrics import make_metric  # noqa: E402
from jetforge.cli.main import main  # noqa: E402
from jetforge.errors import CalibrationError  # noqa: E402
from jetforge.runtime.inputs import ClipContract  # noqa: E402

CONTRACT = {"window": 8, "crop_height": 64, "crop_width": 32, "margin": 1.25, "gray_mean": 0.5, "gray_std": 0.25,
            "color": "gray", "fps_trained": 10.0, "stride_trained": 4}


@pytest.fixture(scope="module")
def vtest() -> Path:
    from jetforge.assets import asset_path
    from jetforge.errors import AssetError

    try:
        return asset_path("opencv_samples", "vtest.avi")
    except AssetError as err:  # offline and not cached
        pytest.skip("vtest.avi not available: %s" % err)


@pytest.fixture(scope="module")
def clip_model(tmp_path_factory) -> Path:
    """A tiny 3D CNN over grey clips, exported by jetforge with a clip sidecar (random weights, seed 0)."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from jetforge.compress.export import export_onnx

    class Tiny3d(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv3d(1, 8, 3, stride=(1, 2, 2), padding=1), nn.BatchNorm3d(8)
            self.dw, self.pw = nn.Conv3d(8, 8, 3, stride=2, padding=1, groups=8), nn.Conv3d(8, 16, 1)
            self.pool, self.fc = nn.AdaptiveAvgPool3d(1), nn.Linear(16, 3)

        def forward(self, x):
            x = torch.relu(self.b1(self.c1(x.unsqueeze(1))))
            return self.fc(self.pool(torch.relu(self.pw(self.dw(x)))).flatten(1))

    torch.manual_seed(0)
    net = Tiny3d()
    with torch.no_grad():  # BatchNorm statistics that are not the identity, so folding is exercised
        net.b1.running_mean.uniform_(-0.2, 0.2)
        net.b1.running_var.uniform_(0.5, 2.0)
    path = tmp_path_factory.mktemp("clipmodel") / "tiny3d.onnx"
    export_onnx(net, path, (1, 8, 64, 32), task="action", model_name="tiny3d", labels=["a", "b", "c"],
                input_name="clip", output_name="logits", extra={"clip": CONTRACT})
    return path


def _grey_frames(video: Path, indices):
    cap, out, i = cv2.VideoCapture(str(video)), {}, 0
    while i <= max(indices):
        ok, frame = cap.read()
        if not ok:
            break
        if i in indices:
            out[i] = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
        i += 1
    cap.release()
    return out


def _reference_clip(grays, region, contract):
    """The clip by hand: pad with grey 128, slice, area-resize, (g/255 - mean)/std."""
    x0, y0, x1, y1 = region
    crops = []
    for g in grays:
        pad = max(0, -x0, -y0, x1 - g.shape[1], y1 - g.shape[0])
        p = np.pad(g, pad, constant_values=128) if pad else g
        crops.append(cv2.resize(p[y0 + pad:y1 + pad, x0 + pad:x1 + pad], (contract["crop_width"],
                                                                          contract["crop_height"]),
                                interpolation=cv2.INTER_AREA))
    return (np.stack(crops).astype(np.float64) / 255.0 - contract["gray_mean"]) / contract["gray_std"]


def test_sliding_clips_are_cut_at_the_models_rate_and_crop(vtest):
    contract = ClipContract.from_dict(dict(CONTRACT))
    src = ClipVideo(vtest, contract, mode="sliding", stride=5, start=100, stop=160)
    assert src.fps == pytest.approx(10.0) and src.step == 1  # vtest is 10 fps: every frame is sampled
    # windows of 8 consecutive frames every 5 inside [100, 160): starts 100, 105, ..., 150
    assert [w.frames[0] for w in src.windows()] == list(range(100, 153, 5))
    assert all(w.frames == tuple(range(w.frames[0], w.frames[0] + 8)) for w in src.windows())
    clips = list(src.iterate(3))
    assert [c.frames[0] for _, c in clips] == [100, 125, 150]  # evenly spread, deterministic
    frames = _grey_frames(vtest, set(range(100, 158)))
    h, w = frames[100].shape
    assert whole_frame_region(h, w, contract) == (int(round((w - h / 2) / 2)), 0, int(round((w - h / 2) / 2))
                                                  + int(round(h / 2)), h)  # 1:2 crop, full height, centred
    for name, clip in clips:
        want = _reference_clip([frames[i] for i in clip.frames], whole_frame_region(h, w, contract), CONTRACT)
        assert clip.tensor.shape == (8, 64, 32) and clip.tensor.dtype == np.float32
        np.testing.assert_allclose(clip.tensor, want, atol=1e-5)  # float32 rounding of values within +-2
        assert name.endswith("vtest.avi#%d" % clip.frames[0])


def test_an_rgb_clip_model_calibrates_on_nctwh_clips(vtest, tmp_path):
    """An RGB clip contract gives (3, T, H, W) clips; the (N, 3, T, H, W) input's range is the clips' own."""
    torch = pytest.importorskip("torch")
    from torch import nn

    from jetforge.calibrate.calibrate_model import calibrate
    from jetforge.compress.export import export_onnx

    rgb = dict(CONTRACT, color="rgb", crop_height=32, crop_width=32)
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv3d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
                        nn.Linear(4, 2))
    export_onnx(net, tmp_path / "rgb.onnx", (1, 3, 8, 32, 32), task="action", labels=["x", "y"], input_name="clip",
                extra={"clip": rgb})
    contract = ClipContract.from_dict(dict(rgb))
    _, clip = next(iter(collect_clip_sources(["%s@50:58" % vtest], contract, 1)))
    cap = cv2.VideoCapture(str(vtest))
    cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
    bgr = [cap.read()[1] for _ in range(58)][50:]
    cap.release()
    x0, y0, x1, y1 = whole_frame_region(bgr[0].shape[0], bgr[0].shape[1], contract)
    crops = np.stack([cv2.resize(f[y0:y1, x0:x1], (32, 32), interpolation=cv2.INTER_AREA)[:, :, ::-1] for f in bgr])
    want = (crops / 255.0 - np.array(contract.channel_mean)) / np.array(contract.channel_std)  # (T, H, W, RGB)
    assert clip.tensor.shape == (3, 8, 32, 32)
    np.testing.assert_allclose(clip.tensor, want.transpose(3, 0, 1, 2), atol=2e-5)  # std 0.224: values up to ~2.7
    result = calibrate(tmp_path / "rgb.onnx", "%s@0:120" % vtest, samples=12, min_samples=8, plots=False,
                       progress=False, algorithm="max")
    clips = np.stack([c.tensor for _, c in collect_clip_sources(["%s@0:120" % vtest], contract, 12)])
    assert clips.shape == (12, 3, 8, 32, 32)
    assert result.amax["clip"] == pytest.approx(float(np.abs(clips).max()), rel=1e-6)


def test_frame_ranges_and_the_shared_video_split(vtest):
    assert parse_video_range("%s@10:20" % vtest) == (vtest, 10, 20)
    assert parse_video_range("%s@300:" % vtest) == (vtest, 300, None)
    assert parse_video_range(str(vtest)) == (vtest, 0, None)
    with pytest.raises(CalibrationError, match="empty"):
        parse_video_range("%s@20:10" % vtest)
    contract = ClipContract.from_dict(dict(CONTRACT))
    data, ev, notes = split_shared_videos([str(vtest)], [str(vtest)], contract)
    assert data == ["%s@0:397" % vtest] and ev == ["%s@405:" % vtest]  # 795 frames; guard = one clip (8 frames)
    assert notes[0]["guard_frames"] == 8
    other = split_shared_videos([str(vtest)], ["other.mp4"], contract)
    assert other[0] == [str(vtest)] and other[1] == ["other.mp4"] and other[2] == []


def test_per_track_windows_follow_the_tracks_skip_gaps_and_keep_the_stride(vtest):
    contract = ClipContract.from_dict(dict(CONTRACT))
    tracks = {}
    for i in range(30):
        if i < 20:  # track 1 walks right on frames 0-19
            tracks.setdefault(i, []).append((1, (300 + 4 * i, 200, 340 + 4 * i, 300)))
        if i < 26 and i not in (10, 11):  # track 2 is lost on frames 10 and 11
            tracks.setdefault(i, []).append((2, (100, 150 + i, 130, 210 + i)))
    src = ClipVideo(vtest, contract, mode="per-track", stride=3, start=0, stop=30, tracker=replay_tracks(tracks))
    got = [(w.track, w.frames[0]) for w in src.windows()]
    # track 1: windows of 8 start at 0..12, every 3rd kept; track 2: starts 0-2 before the gap, 12-18 after it
    assert got == [(1, 0), (1, 3), (1, 6), (1, 9), (1, 12), (2, 0), (2, 12), (2, 15), (2, 18)]
    frames = _grey_frames(vtest, set(range(30)))
    by_start = {(c.track, c.frames[0]): c for _, c in src.iterate(9)}
    for (tid, start), clip in by_start.items():
        boxes = np.array([dict(tracks[i])[tid] for i in range(start, start + 8)], np.float64)
        x0, y0, x1, y1 = boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max()
        cx, cy, w, h = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) * 1.25, (y1 - y0) * 1.25
        w, h = max(w, h / 2), max(h, w * 2)  # the 1:2 crop aspect, enlarged to fit the union
        region = tuple(int(round(v)) for v in (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        np.testing.assert_allclose(clip.tensor, _reference_clip([frames[i] for i in range(start, start + 8)],
                                                                region, CONTRACT), atol=1e-5)
    assert sorted(by_start) == sorted(got)


@pytest.mark.slow  # the CNN detector on 40 frames, twice: ~5 s of CPU
def test_per_track_clips_are_the_action_apps_crops_along_cnn_tracks(vtest):
    from jetforge.vision.person_tracks import person_tracks
    from jetforge.workflow.model_refs import ensure_person_detector
    from jetforge.vision.ssd_detector import SsdPeopleDetector

    contract = ClipContract.from_dict(dict(CONTRACT, stride_trained=3))
    with SsdPeopleDetector(ensure_person_detector()[0]) as detector:
        src = ClipVideo(vtest, contract, mode="per-track", start=0, stop=40, tracker=lambda: person_tracks(detector),
                        max_per_track=4)
        windows = src.windows()
        clips = list(src.iterate(len(windows)))
        # the same tracker run again, independently: which boxes each track had on each frame
        track, seen = person_tracks(detector), {}
        frames = _grey_frames(vtest, set(range(40)))
        cap = cv2.VideoCapture(str(vtest))
        for i in range(40):
            for tid, box in track(i, cap.read()[1]):
                seen.setdefault(tid, {})[i] = np.asarray(box, np.float64)
        cap.release()
    assert len(windows) >= 4 and len({w.track for w in windows}) >= 2  # several people walk in vtest's first 4 s
    assert len(clips) == len(windows)
    for name, clip in clips:
        boxes = seen[clip.track]
        assert all(i in boxes for i in clip.frames)  # a box on every frame of the window
        stacked = np.stack([boxes[i] for i in clip.frames])
        region = contract.region(stacked)  # the union of the boxes, enlarged: ClipContract's rule
        np.testing.assert_allclose(clip.tensor, _reference_clip([frames[i] for i in clip.frames], region, CONTRACT),
                                   atol=1e-5)
        assert name.endswith("#%d:t%d" % (clip.frames[0], clip.track))
    for tid in {w.track for w in windows}:
        starts = [w.frames[0] for w in windows if w.track == tid]
        assert len(starts) <= 4 and all(b - a >= 3 for a, b in zip(starts, starts[1:]))  # cap, stride


def _activations(model_path: Path, clips: np.ndarray, names):
    """Tensors ``names`` of the FP32 model on ``clips``, from a plain ONNX Runtime session (no jetforge code)."""
    m = onnx.load(str(model_path))
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    for n in names:
        m.graph.output.append(inferred[n])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(list(names), {"clip": clips})
    return dict(zip(names, outs))


def test_statistics_and_algorithms_on_clips_match_numpy(clip_model, vtest, tmp_path):
    from jetforge.calibrate.calibrate_model import calibrate
    from jetforge.calibrate.algorithms import compute_amax
    from jetforge.calibrate.stats import collect_from_batches

    data = "%s@0:200" % vtest
    result = calibrate(clip_model, data, samples=24, plots=False, progress=False, algorithm="max",
                       out=tmp_path / "m.calib", min_samples=8)
    report = json.loads((tmp_path / "m.calib.json").read_text())
    assert report["data"]["sources"][0]["kind"] == "clips (sliding)" and result.samples == 24
    contract = ClipContract.from_dict(dict(CONTRACT))
    clips = np.stack([c.tensor for _, c in collect_clip_sources([data], contract, 24)])
    assert clips.shape == (24, 8, 64, 32)
    conv = [n for n in onnx.load(str(clip_model)).graph.node if n.op_type == "Conv"]
    five_d = [conv[1].input[0], conv[2].output[0]]  # (N, 8, 8, 32, 16) and (N, 16, 4, 16, 8) activations
    acts = _activations(clip_model, clips, five_d)
    assert acts[five_d[0]].ndim == 5 and acts[five_d[1]].ndim == 5
    # "max": the exact largest |x| over the 24 clips, for the input and for 5-D activations
    assert result.amax["clip"] == pytest.approx(float(np.abs(clips).max()), rel=1e-6)
    for n in five_d:
        assert result.amax[n] == pytest.approx(float(np.abs(acts[n]).max()), rel=1e-6)
    # percentile and histogram counts of a 5-D tensor, collected batch by batch, against numpy over all of it
    stats = collect_from_batches(clip_model, [clips[:8], clips[8:16], clips[16:]], tensors=five_d, threads=1)
    for n in five_d:
        h, x = stats.histograms[n], np.abs(acts[n].astype(np.float64)).ravel()
        counts = np.histogram(x, bins=len(h.counts), range=(0.0, len(h.counts) * h.width))[0]
        assert int(counts.sum()) == x.size == h.count
        assert np.abs(counts - h.counts).sum() <= 2 * 1e-6 * x.size + 2  # edge values: float32 vs float64 edges
        for pct in (99.0, 99.99):
            assert abs(compute_amax(h, "percentile", percentile=pct) - np.percentile(x, pct)) <= h.width * 1.0001


def test_clip_accuracy_metric_against_a_hand_computation():
    rng = np.random.default_rng(3)
    ref = rng.normal(size=(40, 3))
    cand = ref.copy()
    cand[[1, 5, 9], :] = cand[[1, 5, 9], ::-1] + 5 * np.eye(3)[[0, 0, 0]]  # three clips whose top-1 flips
    labels = ref.argmax(axis=1)
    labels[:10] = (labels[:10] + 1) % 3  # FP32 wrong on the first 10
    labels[30:] = -1                     # 10 unlabelled
    groups = ["t%d" % (i // 4) for i in range(40)]
    m = make_metric("clip_accuracy", groups=groups, n_resamples=500, seed=1).compute([ref], [cand], labels)
    agree = ref.argmax(1) == cand.argmax(1)
    known = labels >= 0
    assert m["clips"] == 40 and m["groups"] == 10 and m["labelled"] == 30
    assert m["agreement"] == pytest.approx(agree.mean())
    assert m["accuracy_fp32"] == pytest.approx((ref.argmax(1) == labels)[known].mean())
    assert m["accuracy_int8"] == pytest.approx((cand.argmax(1) == labels)[known].mean())
    assert m["accuracy_diff"] == pytest.approx(m["accuracy_int8"] - m["accuracy_fp32"])
    # the group bootstrap by hand: resample the 10 tracks, pool their clips
    rng = np.random.default_rng(1)
    g = np.array([int(s[1:]) for s in groups])
    means = []
    for _ in range(500):
        pick = rng.integers(0, 10, size=10)
        means.append(np.concatenate([agree[g == k] for k in pick]).mean())
    assert (m["agreement_ci_low"], m["agreement_ci_high"]) == pytest.approx(
        (np.percentile(means, 2.5), np.percentile(means, 97.5)))
    assert m["agreement_ci_low"] <= m["agreement"] <= m["agreement_ci_high"] < 1.0
    plain = make_metric("clip_accuracy").compute([ref], [ref])
    assert plain["agreement"] == 1.0 and plain["accuracy_fp32"] is None and plain["labelled"] == 0


def test_cli_calibrates_and_evaluates_held_out_clips_with_labels(clip_model, vtest, tmp_path, capsys):
    contract = ClipContract.from_dict(dict(CONTRACT))
    held_out = gather_clips(["%s@405:" % vtest], contract, ClipOptions())
    sess = ort.InferenceSession(str(clip_model), providers=["CPUExecutionProvider"])
    fp32 = np.concatenate([sess.run(None, {"clip": b})[0] for b in held_out.batches]).argmax(axis=1)
    labels = fp32.copy()
    labels[::3] = (labels[::3] + 1) % 3  # FP32 right on exactly 2 of every 3 labelled clips
    lines = ["%s\t%d" % (Path(n).name, y) for n, y in zip(held_out.names, labels)]
    (tmp_path / "labels.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "cli.calib"
    code = main(["calibrate", str(clip_model), "--data", str(vtest), "--eval", str(vtest), "--samples", "32",
                 "--min-samples", "8", "--no-plots", "--labels", str(tmp_path / "labels.txt"), "--out", str(out),
                 "--json"])
    assert code == 0
    ev = json.loads((tmp_path / "cli.calib.json").read_text())["evaluation"]
    clip = ev["int8"]["metrics"]["clip_accuracy"]
    assert ev["held_out"] is True and ev["held_out_check"]["clip_overlap"]["overlapping"] == 0
    assert ev["held_out_check"]["clip_overlap"]["min_gap_frames"] >= 8  # the guard of one clip
    assert ev["held_out_check"]["split"][0]["evaluation_frames"] == [405, 795]
    assert clip["clips"] == len(held_out.names) == ev["samples"]["used"]
    assert clip["accuracy_fp32"] == pytest.approx(np.mean(fp32 == labels))
    assert ev["int8"]["accuracy_fp32"] == pytest.approx(np.mean(fp32 == labels), abs=5e-5)  # rounded to 4 places
    assert 0.0 <= clip["agreement"] <= 1.0 and clip["accuracy_diff_ci_low"] <= clip["accuracy_diff_ci_high"]
    capsys.readouterr()
    # overlapping frame ranges are not held out, and the output says so
    code = main(["calibrate", str(clip_model), "--data", "%s@0:120" % vtest, "--eval", "%s@100:200" % vtest,
                 "--samples", "8", "--min-samples", "8", "--no-plots", "--out", str(tmp_path / "b.calib")])
    assert code == 0 and "NOT held out" in capsys.readouterr().out
    ev = json.loads((tmp_path / "b.calib.json").read_text())["evaluation"]
    assert ev["held_out"] is False and ev["held_out_check"]["clip_overlap"]["overlapping"] > 0


@pytest.mark.parametrize("extra, message", [
    (["--clips", "sliding"], "clip options (--clips, --clip-stride) apply to clip models"),
    (["--clip-stride", "2"], "clip options (--clips, --clip-stride) apply to clip models"),
    (["--detector", "hog"], "go with --clips per-track"),
    (["--clips-per-track", "3"], "go with --clips per-track"),
])
def test_cli_refuses_clip_options_on_an_image_model_in_one_line(tiny_model, image_dir, tmp_path, capsys, extra,
                                                                message):
    code = main(["calibrate", str(tiny_model), "--data", str(image_dir), "--out", str(tmp_path / "x.calib")] + extra)
    err = capsys.readouterr().err.strip()
    assert code == 1 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x.calib").exists()


def test_cli_refuses_what_cannot_make_a_clip(clip_model, vtest, image_dir, tmp_path, capsys):
    wrong = tmp_path / "wrong.onnx"  # the same model with a sidecar that claims 16-frame clips
    wrong.write_bytes(clip_model.read_bytes())
    side = json.loads(Path(str(clip_model) + ".json").read_text())
    side["input"]["window"] = 16
    Path(str(wrong) + ".json").write_text(json.dumps(side))
    cases = [(["--model", str(wrong), "--data", str(vtest)], "makes clips of shape 16x64x32 but model input clip "
                                                             "takes 8x64x32"),
             (["--data", "%s@0:5" % vtest], "long enough for one clip"),
             (["--data", str(image_dir)], "needs video"),
             (["--data", str(vtest), "--video-sampling", "scene"], "consecutive frames"),
             (["--data", "%s@0:200" % vtest, "--eval", "%s@790:" % vtest], "no clip of 8 frames")]
    for extra, message in cases:
        model = [] if "--model" in extra else [str(clip_model)]
        code = main(["calibrate"] + model + ["--no-plots", "--samples", "8", "--min-samples", "8",
                     "--out", str(tmp_path / "y.calib")] + extra)
        err = capsys.readouterr().err.strip()
        assert code == 1 and message in err and len(err.splitlines()) == 1, (extra, err)


@pytest.mark.slow  # the CNN detector on 90 frames: ~6 s of CPU
def test_cli_per_track_clips_use_the_cnn_detector_and_group_by_track(clip_model, vtest, tmp_path):
    code = main(["calibrate", str(clip_model), "--data", "%s@0:40" % vtest, "--eval", "%s@50:90" % vtest,
                 "--clips", "per-track", "--clip-stride", "3", "--clips-per-track", "2", "--samples", "8",
                 "--min-samples", "4", "--no-plots", "--out", str(tmp_path / "pt.calib")])
    assert code == 0
    report = json.loads((tmp_path / "pt.calib.json").read_text())
    source = report["data"]["sources"][0]
    assert source["kind"] == "clips (per-track)" and source["frames"] == [0, 40] and source["stride"] == 3
    ev = report["evaluation"]
    clip = ev["int8"]["metrics"]["clip_accuracy"]
    assert ev["held_out"] is True and ev["held_out_check"]["clip_overlap"]["overlapping"] == 0
    # several people walk in frames 50-89 (7 tracks here; detector floats may move a track on another CPU): at most
    # 2 clips per track, grouped by track for the intervals
    assert clip["groups"] >= 2 and clip["groups"] <= clip["clips"] <= 2 * clip["groups"]
