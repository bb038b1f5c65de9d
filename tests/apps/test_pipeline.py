"""The pipeline on real decoded video: order, back-pressure, drop and error policies, batching over
several streams into one real ONNX Runtime session, outputs kept when a source is lost, metrics and plots."""

import json
import threading
import time

import numpy as np
import pytest

from jetforge.apps.pipeline import (FusedPreprocess, Pipeline, PipelineError, PipelineOptions, Task, format_metrics,
                                    run_app)
from jetforge.apps.video import open_source
from jetforge.apps.video.sources import LiveSource, SourceOptions
from jetforge.errors import ConfigError, StreamError
from jetforge.runtime.inputs import IMAGENET_TFLITE, IMAGENET_TORCHVISION, Preprocess


class MeanColour(Task):
    """A small real task: the mean BGR colour of a 32x32 thumbnail; optional failures and delays."""

    name = "mean"

    def __init__(self, fail_on=(), fail_stage="postprocess", infer_delay=0.0, sink_delay=0.0):
        self.fail_on, self.fail_stage, self.infer_delay = set(fail_on), fail_stage, infer_delay
        self.batches = []

    def preprocess(self, frame):
        import cv2

        if self.fail_stage == "preprocess" and frame.index in self.fail_on:
            raise ValueError("bad pixels in frame %d" % frame.index)
        return cv2.resize(frame.image, (32, 32), interpolation=cv2.INTER_AREA).astype(np.float32)

    def infer(self, inputs):
        self.batches.append(len(inputs))
        if self.infer_delay:
            time.sleep(self.infer_delay)
        return [x.mean(axis=(0, 1)) for x in inputs]

    def postprocess(self, item):
        if self.fail_stage == "postprocess" and item.frame.index in self.fail_on:
            raise ValueError("no result for frame %d" % item.frame.index)
        return {"mean": [round(float(v), 3) for v in item.output]}


def run(clip, task, n=20, **kw):
    events = []
    sink = kw.pop("sink", None) or (lambda item, status: events.append((item.stream, item.frame.index, item.event)))
    with open_source(clip) as source:
        result = Pipeline([source], task, sink, PipelineOptions(max_frames=n, **kw)).run()
    return result, events


def test_overlapped_and_sequential_runs_give_the_same_events_in_order(bikes_clip):
    threaded, ev1 = run(bikes_clip, MeanColour(), n=25)
    sequential, ev2 = run(bikes_clip, MeanColour(), n=25, overlap=False)
    assert ev1 == ev2 and [e[1] for e in ev1] == list(range(25))
    m = threaded.metrics.to_dict()
    assert threaded.stopped == "max frames" and m["frames"] == 25 and m["errors"]["total"] == 0
    assert m["warmup"]["frames"] == 5  # the default WARMUP_FRAMES: frames 0-4 apart, 5-24 in the statistics
    for stage in ("decode", "preprocess", "infer", "postprocess", "sink"):
        s = m["latency_ms"]["stages"][stage]
        assert s["count"] == 20 and s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"] <= s["max_ms"], stage
        assert m["warmup"]["latency_ms"]["stages"][stage]["count"] == 5, stage
    e2e = m["latency_ms"]["end_to_end"]
    assert e2e["count"] == 20 and m["latency_ms"]["frame_to_result"]["mean_ms"] <= e2e["mean_ms"]
    assert m["fps"] > 0 and m["dropped"]["total"] == 0 and m["memory"]["peak_rss_mib"] > 20
    table = format_metrics(m)
    assert "25 in" in table and "end to end" in table and "p99" in table


def test_back_pressure_bounds_read_ahead(bikes_clip):
    reads = []
    lag = []

    class Counting:
        def __init__(self, source):
            self.s = source
            self.uri, self.dropped = source.uri, 0

        def read(self):
            f = self.s.read()
            reads.append(f.index if f is not None else None)
            return f

    def slow_sink(item, status):
        lag.append(len(reads) - 1 - item.frame.index)
        time.sleep(0.01)

    with open_source(bikes_clip) as source:
        Pipeline([Counting(source)], MeanColour(), slow_sink, PipelineOptions(max_frames=40, queue_size=2)).run()
    # Four queues of 2 plus one frame held by each of the five stages: never more than 13 frames ahead.
    assert len(lag) == 40 and max(lag) <= 13


def test_drop_oldest_when_behind_and_never_by_default(bikes_clip):
    result, events = run(bikes_clip, MeanColour(infer_delay=0.02), n=60, drop="oldest", queue_size=1)
    m = result.metrics.to_dict()
    assert m["dropped"]["pipeline"] > 0 and m["frames"] + m["dropped"]["pipeline"] == 60
    indices = [e[1] for e in events]
    assert indices == sorted(indices) and indices[-1] == 59
    kept, _ = run(bikes_clip, MeanColour(infer_delay=0.005), n=30, queue_size=1)
    assert kept.metrics.frames == 30 and kept.metrics.dropped == 0


def test_skip_policy_counts_failed_frames_and_passes_an_error_event(bikes_clip):
    result, events = run(bikes_clip, MeanColour(fail_on={3, 7}), n=12)
    m = result.metrics.to_dict()
    assert m["frames"] == 10 and m["errors"]["by_stage"] == {"postprocess": 2}
    errors = [e for e in events if e[2].get("type") == "error"]
    assert [(e[1], e[2]["stage"], e[2]["error"]) for e in errors] == [
        (3, "postprocess", "ValueError: no result for frame 3"), (7, "postprocess", "ValueError: no result for frame 7")]
    assert m["errors"]["samples"][0] == {"stage": "postprocess", "stream": 0, "frame": 3,
                                         "error": "ValueError: no result for frame 3"}


@pytest.mark.parametrize("overlap", [True, False])
def test_stop_policy_and_consecutive_errors_end_the_run(bikes_clip, overlap):
    with pytest.raises(PipelineError) as err:
        run(bikes_clip, MeanColour(fail_on={4}, fail_stage="preprocess"), n=20, on_error="stop", overlap=overlap)
    assert err.value.one_line().startswith("stage preprocess failed on frame 4 of stream 0: ValueError: bad pixels "
                                           "in frame 4; stopping: the error policy is 'stop'")
    with pytest.raises(PipelineError, match=r"4 failures in a row \(more than --max-consecutive-errors 3\)"):
        run(bikes_clip, MeanColour(fail_on=set(range(100))), n=20, max_consecutive_errors=3, overlap=overlap)


def test_a_bug_in_a_stage_worker_is_not_swallowed(bikes_clip):
    class Broken(MeanColour):
        def infer(self, inputs):
            return []  # wrong length: the pipeline refuses it

    with pytest.raises(PipelineError, match="the infer stage returned 0 outputs for 1 frames"):
        run(bikes_clip, Broken(), n=5, on_error="stop")


def test_options_are_checked():
    with pytest.raises(ConfigError, match="error policy"):
        PipelineOptions(on_error="ignore")
    with pytest.raises(ConfigError, match="drop policy"):
        PipelineOptions(drop="newest")
    with pytest.raises(ConfigError, match="queue_size"):
        PipelineOptions(queue_size=0)


def test_fused_preprocess_equals_the_shared_preprocessing(bikes_frames):
    image = bikes_frames[30]
    for p in (IMAGENET_TORCHVISION, IMAGENET_TFLITE, Preprocess(resize="stretch", color="bgr", height=96, width=128),
              Preprocess(resize="letterbox", height=160, width=160)):
        fused = FusedPreprocess(p)
        np.testing.assert_allclose(fused(image), p.apply(image), atol=1e-5)
    assert not FusedPreprocess(Preprocess(resize="letterbox")).fused


def test_four_streams_are_batched_into_one_session(bikes_clip, mobilenet_onnx):
    from jetforge.apps.tasks.classify import ClassifyTask
    from jetforge.runtime.session import open_session

    results = {}
    with open_session(mobilenet_onnx, threads=1) as session:
        task = ClassifyTask(session)
        sources = [open_source(bikes_clip) for _ in range(4)]
        pipeline = Pipeline(sources, task, lambda item, status: results.setdefault(
            (item.stream, item.frame.index), item.event["top"][0]), PipelineOptions(max_frames=6, batch_size=4,
                                                                                   batch_timeout_s=5.0))
        m = pipeline.run().metrics.to_dict()
        for s in sources:
            s.close()
        single = ClassifyTask(session)
        with open_source(bikes_clip) as one:
            reference = [single.head(single.model([single.preprocess(f)])[0][single.output_name])[0]
                         for f, _ in zip(one, range(6))]
    assert m["frames"] == 24 and m["frames_per_stream"] == {"0": 6, "1": 6, "2": 6, "3": 6}
    # batch_timeout_s 5: frames of 4 streams always meet in a batch on a loaded machine (0.05 s did not ensure it);
    # the end of the streams ends the last wait, so it costs no time
    assert m["batch"]["max_size"] == 4 and m["batch"]["mean_size"] > 1.5
    for (stream, index), top in results.items():
        assert top["label"] == reference[index].label == "switch"
        assert top["p"] == pytest.approx(reference[index].prob, abs=1e-4)


class FakeCamera:
    """Stands in for a camera that delivers ``frames`` real frames of a clip, then is unplugged."""

    def __init__(self, images):
        self.images = list(images)

    def read(self):
        time.sleep(0.01)
        if not self.images:
            return False, None
        return True, self.images.pop(0)

    def release(self):
        pass


def test_a_lost_camera_keeps_the_events_so_far(tmp_path, bikes_frames):
    images = [bikes_frames[i].copy() for i in (5, 30, 75, 140, 160, 175)] * 3
    calls = []

    def factory():
        calls.append(1)
        if len(calls) > 1:
            raise StreamError("device unplugged")
        return FakeCamera(images)

    source = LiveSource("v4l2:///dev/video7", factory, SourceOptions(buffer=32, backoff_s=0.02, backoff_max_s=0.02,
                                                                        max_reconnects=2), what="camera")
    result = run_app(MeanColour(), [source], tmp_path / "out", PipelineOptions(), progress=False)
    source.close()
    assert len(result.stream_errors) == 1
    assert result.stream_errors[0].startswith("lost camera v4l2:///dev/video7: device unplugged; 2 attempts over 0.04 s")
    events = [json.loads(x) for x in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    assert [e["frame"] for e in events] == list(range(18))  # every frame the camera gave before it vanished
    assert all(e["type"] == "mean" and "t" in e and "latency_ms" in e for e in events)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["status"] == "finished with stream errors" and metrics["frames"] == 18
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "annotated.mp4", "events.jsonl", "fps.png", "latency.png", "metrics.json"]


def _mixed_folder(folder, bikes_frames):
    """Six real frames at six sizes, with an unreadable file first and another in the middle (names sort so)."""
    import cv2

    folder.mkdir()
    sizes = [(640, 272), (320, 320), (200, 400), (800, 200), (96, 64), (640, 272)]
    names = []
    for i, (index, size) in enumerate(zip(sorted(bikes_frames), sizes)):
        name = "img_%d%s.png" % (i, "a" if i == 3 else "")
        cv2.imwrite(str(folder / name), cv2.resize(bikes_frames[index], size))
        names.append(name)
    (folder / "img_0_broken.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")  # sorts right after img_0.png
    (folder / "img_3_broken.png").write_bytes(b"")  # sorts right before img_3a.png
    return sorted(names + ["img_0_broken.jpg", "img_3_broken.png"])


@pytest.mark.parametrize("overlap", [True, False])
def test_image_folder_of_mixed_sizes_and_unreadable_files_processes_every_readable_frame(
        tmp_path, bikes_frames, overlap):
    order = _mixed_folder(tmp_path / "photos", bikes_frames)
    with open_source(tmp_path / "photos") as source:
        # The strictest error policy: skipping an unreadable input is not a stage failure, so it ends nothing.
        options = PipelineOptions(on_error="stop", max_consecutive_errors=0, overlap=overlap)
        result = run_app(MeanColour(), [source], tmp_path / "out", options, plots=False, progress=False)
    m = result.metrics
    assert m["status"] == "finished" and m["frames"] == 6 and m["errors"]["total"] == 0
    assert m["skipped"]["total"] == 2
    assert order[1] == "img_0_broken.jpg" and order[4] == "img_3_broken.png"  # name order: "." < "_" < "a"
    assert [(x["frame"], x["image"]) for x in m["skipped"]["samples"]] == [(1, "img_0_broken.jpg"),
                                                                           (4, "img_3_broken.png")]
    events = [json.loads(x) for x in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    assert [(e["type"], e["frame"], e["image"]) for e in events] == [
        ("skipped" if "broken" in name else "mean", i, name) for i, name in enumerate(order)]
    assert "cannot be decoded" in events[1]["reason"]
    assert m["video"][0]["frames"] == 6 and m["video"][0]["size"] == [640, 272]
    assert m["video"][0]["letterboxed"] == 4  # the four frames whose size differs from the first
    assert m["sources"][0]["skipped"] == ["img_0_broken.jpg", "img_3_broken.png"]
    import cv2

    cap = cv2.VideoCapture(str(tmp_path / "out" / "annotated.mp4"))
    count = 0
    while cap.read()[0]:
        count += 1
    cap.release()
    assert count == 6
    assert "skipped   2 unreadable input frame(s): img_0_broken.jpg, img_3_broken.png" in format_metrics(m)


def test_a_failing_frame_of_an_image_folder_is_named_by_its_file(tmp_path, bikes_frames):
    order = _mixed_folder(tmp_path / "photos", bikes_frames)
    with open_source(tmp_path / "photos") as source:
        with pytest.raises(PipelineError) as err:
            Pipeline([source], MeanColour(fail_on={5}, fail_stage="preprocess"), None,
                     PipelineOptions(on_error="stop")).run()
    assert order[5] == "img_3a.png"
    assert err.value.one_line().startswith("stage preprocess failed on frame 5 (img_3a.png) of stream 0: ")


def test_two_infer_workers_keep_frame_order_and_results(bikes_clip, mobilenet_onnx):
    """Two threads run one real ORT session at once; postprocess and the sink still see frames in order."""
    from jetforge.apps.tasks.classify import ClassifyTask
    from jetforge.runtime.session import open_session

    def classify(workers, n=40):
        events, threads = [], set()

        def sink(item, status):
            events.append((item.frame.index, item.event["top"][0]["label"], item.event["top"][0]["p"]))

        class Recording(ClassifyTask):
            def infer(self, inputs):
                threads.add(threading.current_thread().name)
                return super().infer(inputs)

        with open_session(mobilenet_onnx, threads=1) as session, open_source(bikes_clip) as source:
            # frames 60..99: the stretch of the clip where the top-1 class changes from frame to frame
            for _ in range(60):
                source.read()
            result = Pipeline([source], Recording(session), sink,
                              PipelineOptions(max_frames=n, infer_workers=workers, queue_size=4)).run()
        return result, events, threads

    result, two, threads = classify(2)
    _, one, _ = classify(1)
    frames = [e[0] for e in two]
    assert len(two) == 40 and all(a < b for a, b in zip(frames, frames[1:]))
    assert [e[1] for e in two] == [e[1] for e in one] and len({e[1] for e in one}) > 1
    np.testing.assert_allclose([e[2] for e in two], [e[2] for e in one], atol=1e-4)
    assert threads == {"jetforge-infer-0", "jetforge-infer-1"}
    m = result.metrics.to_dict()
    assert result.stopped == "max frames" and m["frames"] == 40 and m["errors"]["total"] == 0
    for stage in ("decode", "preprocess", "infer", "postprocess", "sink"):
        # frames 60..99: none is a warm-up frame (those are the indexes below warmup_frames)
        assert m["latency_ms"]["stages"][stage]["count"] == 40 and m["warmup"]["frames"] == 0, stage
    assert not [t for t in threading.enumerate() if t.name.startswith("jetforge-")]


def test_two_infer_workers_reorder_and_follow_the_error_policy(bikes_clip):
    ref, ev1 = run(bikes_clip, MeanColour(fail_on={3, 7}), n=30)
    two, ev2 = run(bikes_clip, MeanColour(fail_on={3, 7}, infer_delay=0.003), n=30, infer_workers=2)
    assert ev2 == ev1 and [e[1] for e in ev2] == list(range(30))
    assert two.metrics.to_dict()["errors"]["by_stage"] == {"postprocess": 2} and two.metrics.frames == 28

    # Failures in preprocess skip inference but still take their place in the order.
    _, ev3 = run(bikes_clip, MeanColour(fail_on={2, 11}, fail_stage="preprocess", infer_delay=0.003), n=20,
                 infer_workers=2)
    assert [e[1] for e in ev3] == list(range(20))
    assert [e[1] for e in ev3 if e[2].get("type") == "error"] == [2, 11]

    class FailingInfer(MeanColour):
        counting = threading.Lock()  # two workers call infer at once: the count and the append are one step

        def infer(self, inputs):
            time.sleep(0.002)
            with self.counting:
                if len(self.batches) in (4, 9):
                    self.batches.append(len(inputs))
                    raise ValueError("model failed")
                return super().infer(inputs)

    task = FailingInfer()
    result, ev4 = run(bikes_clip, task, n=24, infer_workers=2, batch_size=2, queue_size=4)
    errors = [e for e in ev4 if e[2].get("type") == "error"]
    assert [e[1] for e in ev4] == list(range(24)) and len(errors) == result.metrics.error_count >= 2
    assert all(e[2] == {"type": "error", "stage": "infer", "error": "ValueError: model failed"} for e in errors)

    with pytest.raises(PipelineError, match="stage infer failed on frame .*model failed; stopping: the error policy"):
        run(bikes_clip, FailingInfer(), n=24, infer_workers=2, on_error="stop")
    assert not [t for t in threading.enumerate() if t.name.startswith("jetforge-")]


def test_two_infer_workers_shut_down_cleanly(bikes_clip):
    # The end of a short stream, a stop request mid-run, and a worker that is much slower than the other.
    result, events = run(bikes_clip, MeanColour(), n=3, infer_workers=3)
    assert [e[1] for e in events] == [0, 1, 2] and result.stopped == "max frames"

    seen = []
    with open_source(bikes_clip) as source:
        pipeline = Pipeline([source], MeanColour(infer_delay=0.002), None, PipelineOptions(infer_workers=2))
        pipeline.on_done = lambda item: (seen.append(item.frame.index), len(seen) == 10 and pipeline.request_stop())
        result = pipeline.run()
    assert result.stopped == "stop requested" and seen == list(range(len(seen))) and len(seen) >= 10

    class OneSlowFrame(MeanColour):
        slept = False

        def infer(self, inputs):
            if threading.current_thread().name == "jetforge-infer-0" and not self.slept:
                self.slept = True
                time.sleep(0.3)  # the other worker runs ahead; the reorder buffer waits, bounded
            return super().infer(inputs)

    result, events = run(bikes_clip, OneSlowFrame(), n=40, infer_workers=2, queue_size=1)
    assert [e[1] for e in events] == list(range(40)) and result.metrics.frames == 40
    assert not [t for t in threading.enumerate() if t.name.startswith("jetforge-")]
    with pytest.raises(ConfigError, match="infer_workers must be a whole number of at least 1"):
        PipelineOptions(infer_workers=0)
