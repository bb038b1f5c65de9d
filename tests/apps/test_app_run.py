"""The one app shell (AppRun) of both run paths: one metrics.json schema, warm-up frames kept apart, one `fps`, and
overlay text that fits small frames.

The numbers are checked against values computed here from the durations the test feeds in (no tolerance beyond
float rounding: the collector's statistics are exact while every sample is kept, under MAX_SAMPLES)."""

import json

import numpy as np
import pytest

from jetforge.apps.pipeline.metrics import PipelineMetrics, format_metrics

STREAM_FRAMES = 10


def _fed_metrics(warmup):
    """10 frames of one stream: frames 0-1 slow (3 s end to end, as a first model call is), the rest 10-19 ms; the
    infer stage ran in batches of 2 taking 0.1 s per call."""
    m = PipelineMetrics(warmup_frames=warmup)
    m.start()
    m.t_start -= 100.0  # a run that began 100 s ago: wall = 100 s (+ the test's own microseconds)
    lat = [3.0, 3.0] + [0.010 + 0.001 * i for i in range(8)]
    t0 = m.t_start + 1.0
    for i, seconds in enumerate(lat):
        m.add_stage("infer", 0.1, 0.05, frame=i, batch=2)
        m.add_done(0, t0, t0, t0 + seconds / 2, t0 + seconds, frame=i)
    m.stop()
    return m, lat


def test_warmup_frames_are_out_of_the_latency_statistics_and_reported_apart():
    m, lat = _fed_metrics(warmup=2)
    d = m.to_dict()
    e2e = d["latency_ms"]["end_to_end"]
    steady = np.asarray(lat[2:]) * 1000.0
    assert e2e["count"] == 8 and e2e["max_ms"] == pytest.approx(steady.max()) and e2e["mean_ms"] == pytest.approx(
        steady.mean())
    assert d["latency_ms"]["stages"]["infer"]["count"] == 8
    assert d["warmup"]["frames_per_stream"] == 2 and d["warmup"]["frames"] == 2
    assert d["warmup"]["latency_ms"]["end_to_end"]["mean_ms"] == pytest.approx(3000.0)
    assert d["warmup"]["latency_ms"]["stages"]["infer"]["count"] == 2
    assert d["frames"] == STREAM_FRAMES  # warm-up frames still count as delivered frames
    assert [x * 1000.0 for x in m.end_to_end] == pytest.approx(list(steady))  # what latency.png is drawn from
    printed = format_metrics(d)
    assert "warm-up   first 2 frame(s) of each stream (2 in all)" in printed

    d0 = _fed_metrics(warmup=0)[0].to_dict()  # none set apart: the slow frames are in the statistics
    assert d0["latency_ms"]["end_to_end"]["max_ms"] == pytest.approx(3000.0) and d0["warmup"]["frames"] == 0


def test_one_fps_is_frames_over_the_whole_run_and_the_model_rate_is_named_apart():
    d = _fed_metrics(warmup=2)[0].to_dict()
    assert d["fps"] == pytest.approx(STREAM_FRAMES / d["wall_s"]) and d["wall_s"] == pytest.approx(100.0, abs=1.0)
    # infer: 10 frames, each call 0.1 s shared by 2 frames -> 0.5 s busy -> 20 frames/s of the model alone
    assert d["model_fps"] == pytest.approx(20.0)
    assert d["latency_ms"]["stages"]["infer"]["throughput_fps"] == pytest.approx(20.0)

    def fps_keys(value, path=""):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from ([path + k] if k == "fps" else []) + list(fps_keys(v, path + k + "."))

    assert list(fps_keys(d)) == ["fps"]  # the latency blocks no longer carry LatencyStats' 1/mean "fps"


def test_cpu_and_gpu_paths_write_one_metrics_schema(tmp_path, monkeypatch, bikes_clip, mobilenet_onnx, capsys):
    """The same classify run on both paths (the GPU path on the CPU NVDEC stand-in): the same metrics.json keys,
    latency blocks of the same shape, the path named in `pipeline`, and one printed report format."""
    from jetforge.apps.video.sources.gpu import open as gpu, nvdec
    from jetforge.cli.main import main
    from tests.standins.fake_nvdec import FakeNvDecoder

    common = ["--model", str(mobilenet_onnx), "--source", str(bikes_clip), "--max-frames", "8", "--no-video",
              "--no-plots", "--warmup-frames", "3"]
    assert main(["-q", "app", "classify", "--out", str(tmp_path / "cpu")] + common) == 0
    cpu_printed = capsys.readouterr().out
    monkeypatch.setattr(gpu, "choose_decoder", lambda wanted, have=None: "nvdec")
    monkeypatch.setattr(nvdec, "load_pynvvideocodec", lambda: FakeNvDecoder)
    assert main(["-q", "app", "classify", "--decode", "gpu", "--out", str(tmp_path / "gpu")] + common) == 0
    gpu_printed = capsys.readouterr().out
    cpu, dev = [json.loads((tmp_path / p / "metrics.json").read_text()) for p in ("cpu", "gpu")]
    only_cpu = {"video"}  # the CPU path's MP4 entries; the GPU path encodes apart; both report their --output sinks
    assert set(cpu) - only_cpu == set(dev) - {"encoders"} and cpu["sinks"] == dev["sinks"] == []
    assert (cpu["pipeline"]["path"], dev["pipeline"]["path"]) == ("cpu", "gpu")
    for m in (cpu, dev):
        assert m["frames"] == 8 and m["warmup"]["frames"] == 3 and m["latency_ms"]["end_to_end"]["count"] == 5
        assert m["fps"] == pytest.approx(m["frames"] / m["wall_s"]) and m["model_fps"] > 0
        assert set(m["latency_ms"]) == {"end_to_end", "frame_to_result", "stages"}
        for stage in m["latency_ms"]["stages"].values():
            assert {"count", "p50_ms", "p99_ms", "cpu_mean_ms", "throughput_fps"} <= set(stage) and "fps" not in stage
    assert set(dev["latency_ms"]["stages"]) == {"launch", "results", "postprocess", "sink"}
    for printed in (cpu_printed, gpu_printed):
        assert "FPS end to end" in printed and "latency (ms)" in printed and "warm-up   first 3" in printed


# -- overlay text on small frames -------------------------------------------------------------------------------------
SMALL = (120, 160)  # height, width: a thumbnail-sized frame


def _lit_columns(image):
    return np.flatnonzero(image.max(axis=(0, 2)) > 0)


def test_banner_and_status_text_fit_a_160x120_frame():
    """Long text on a black 160x120 frame: the text's pixels stop short of the right edge (text cut off by the
    frame would light the last column), and the strips the text sits on are inside the frame."""
    from jetforge.apps.pipeline.stages import Status, draw_banner, draw_status

    image = np.zeros(SMALL + (3,), np.uint8)
    box = draw_banner(image, "people 12  |  crossed 34  |  tracks so far 56")
    x0, y0, x1, y1 = box
    assert 0 <= x0 < x1 <= SMALL[1] and 0 <= y0 < y1 <= SMALL[0]
    lit = _lit_columns(image)
    assert lit.size and lit.max() < SMALL[1] - 1 and np.all(image[y1:] == 0)  # nothing drawn below the strip

    image = np.zeros(SMALL + (3,), np.uint8)
    draw_status(image, Status(fps=41.7, latency_ms=123.0, frames=4567, dropped=3, errors=1,
                              label="CNN person detector (SSDLite-MobileNetV2)"))
    lit = _lit_columns(image)
    assert lit.size and lit.max() < SMALL[1] - 1
    rows = np.flatnonzero(image.max(axis=(1, 2)) > 0)
    assert rows.min() >= SMALL[0] // 2  # the bar stays at the bottom


@pytest.mark.parametrize("org", [(150, 5), (-20, 200), (80, 60)])
def test_a_label_box_fits_inside_a_160x120_frame(org):
    """A track's label asked for at the edge (or off the frame) is moved inside it, and shrunk to its width."""
    from jetforge.apps.pipeline.stages import draw_label

    image = np.zeros(SMALL + (3,), np.uint8)
    x0, y0, x1, y1 = draw_label(image, "#123 walking-left 97%", org, (0, 255, 0))
    assert 0 <= x0 < x1 <= SMALL[1] and 0 <= y0 < y1 <= SMALL[0]
    ys, xs = np.nonzero(image.max(axis=2))
    assert xs.min() >= x0 and xs.max() < x1 and ys.min() >= y0 and ys.max() < y1  # every drawn pixel in the box
    assert xs.max() < SMALL[1] - 1


def test_the_people_overlay_on_a_160x120_frame_keeps_its_text_inside():
    """The people app's own annotate on a small frame with a track at the right edge: no text pixel on the edge."""
    from jetforge.apps.pipeline.stages import Item, Status
    from jetforge.apps.tasks.people import PeopleTask
    from jetforge.apps.video.sources.base import Frame

    task = PeopleTask(type("Stub", (), {"label": "stub"})())
    image = np.zeros(SMALL + (3,), np.uint8)
    item = Item(frame=Frame(0, 0.0, image), event={"tracks": [{"id": 7, "box": [150.0, 40.0, 159.0, 90.0]}]})
    task.annotate(image, item, Status(fps=30.0, frames=1, label="a long label of what runs the model"))
    assert _lit_columns(image[:, :, :]).size
    edge = image[:, -1, :]
    box_colour_rows = np.flatnonzero(edge.max(axis=1) > 0)  # only the track's rectangle may touch the edge column
    assert box_colour_rows.size == 0 or (box_colour_rows.min() >= 38 and box_colour_rows.max() <= 92)
