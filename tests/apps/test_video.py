"""File video source and the MP4 / JSON-lines sinks, on the real bikes.mp4 clip."""

import json

import numpy as np
import pytest

from jetforge.apps.video import FileSource, Frame, JsonLinesSink, Mp4Sink, open_source
from jetforge.errors import ConfigError, InputFileError, StreamError


def test_file_source_yields_every_frame_with_index_and_timestamp(bikes_clip):
    with open_source(bikes_clip) as source:
        assert isinstance(source, FileSource)
        assert (source.width, source.height, source.fps, source.frame_count) == (640, 272, 25.0, 250)
        frames = [(f.index, f.timestamp, f.image.shape, f.image.dtype) for f in source]
    assert len(frames) == 250
    assert [f[0] for f in frames] == list(range(250))
    assert [f[1] for f in frames[:3]] == [0.0, 0.04, 0.08]
    assert frames[-1][1] == pytest.approx(249 / 25.0)
    assert {f[2] for f in frames} == {(272, 640, 3)} and {f[3] for f in frames} == {np.dtype(np.uint8)}


def test_end_of_stream_is_normal_and_repeatable(bikes_clip):
    source = open_source(bikes_clip)
    for _ in source:
        pass
    assert source.read() is None and source.read() is None
    source.close()


def test_file_uri(bikes_clip):
    with open_source(bikes_clip.resolve().as_uri()) as source:
        first = next(source)
    assert isinstance(first, Frame) and first.index == 0 and first.size == (640, 272)


def test_bad_sources_fail_at_open_with_one_clear_line(tmp_path):
    with pytest.raises(InputFileError, match="video file .*missing.mp4 does not exist"):
        open_source(tmp_path / "missing.mp4")
    fake = tmp_path / "fake.mp4"
    fake.write_text("not a video\n")
    with pytest.raises(StreamError, match="cannot decode video") as err:
        open_source(fake)
    assert "\n" not in err.value.one_line()
    with pytest.raises(ConfigError, match="unknown scheme ftp://"):
        open_source("ftp://camera.local/stream")


def _pattern(i, size=(160, 96)):
    w, h = size
    img = np.zeros((h, w, 3), np.uint8)
    img[:, : (i * 10) % w] = (0, 0, 255)
    img[h // 2:, :, 1] = 200
    return img


def _decode_all(path):
    """Every frame of a video file, decoded by OpenCV (an independent reader of what the sink wrote)."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    frames = []
    ok, img = cap.read()
    while ok:
        frames.append(img)
        ok, img = cap.read()
    cap.release()
    return frames


def test_mp4_sink_round_trip(tmp_path):
    import cv2

    out = tmp_path / "clip.mp4"
    with Mp4Sink(out, fps=10) as sink:
        for i in range(12):
            sink.write(_pattern(i))
    assert sink.frames == 12 and sink.size == (160, 96)
    assert [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]
    cap = cv2.VideoCapture(str(out))
    assert cap.get(cv2.CAP_PROP_FPS) == 10
    cap.release()
    decoded = _decode_all(out)
    assert len(decoded) == 12 and decoded[0].shape == (96, 160, 3)
    # Lossy, but the pattern survives: red band on the left of frame 5, green in the lower half.
    assert decoded[5][10, 20, 2] > 180 and decoded[5][10, 140, 2] < 60 and decoded[5][80, 100, 1] > 150


def test_interrupted_mp4_leaves_nothing_and_keeps_an_old_file(tmp_path):
    out = tmp_path / "clip.mp4"
    out.write_bytes(b"previous run")
    with pytest.raises(KeyboardInterrupt):
        with Mp4Sink(out, fps=10) as sink:
            sink.write(_pattern(0))
            raise KeyboardInterrupt
    assert out.read_bytes() == b"previous run"
    assert [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]


def test_mp4_sink_letterboxes_frames_of_another_size_instead_of_losing_them(tmp_path):
    """A folder of photos has many sizes; the video keeps every frame, fitted into the first one's size."""
    out = tmp_path / "mixed.mp4"
    tall = np.zeros((96, 80, 3), np.uint8)
    tall[:, :] = (255, 255, 255)  # white, 80 wide: scaled by min(160/80, 96/96) = 1, 40 px bars each side
    wide = np.zeros((48, 320, 3), np.uint8)
    wide[:, :] = (0, 0, 255)  # red, 320x48: scaled by 0.5 to 160x24, 36 px bars above and below
    with Mp4Sink(out, fps=10) as sink:
        sink.write(_pattern(0))
        sink.write(tall)
        sink.write(wide)
        sink.write(_pattern(3))
    assert (sink.frames, sink.letterboxed, sink.size) == (4, 2, (160, 96))
    decoded = _decode_all(out)
    assert len(decoded) == 4 and {d.shape for d in decoded} == {(96, 160, 3)}
    # mp4v is lossy: compare region means with a margin of 25 grey levels (codec error on flat areas is < 10),
    # 4 px away from the edges where the encoder's 8x8 blocks blur across.
    white, grey = decoded[1], 114  # preprocessing's letterbox colour
    assert abs(white[:, :36].mean() - grey) < 25 and abs(white[:, 124:].mean() - grey) < 25
    assert white[4:92, 44:116].mean() > 230
    red = decoded[2]
    assert abs(red[:32].mean() - grey) < 25 and abs(red[64:].mean() - grey) < 25
    assert red[40:56, 4:156, 2].mean() > 200 and red[40:56, 4:156, :2].mean() < 40


def test_fit_frame_keeps_the_aspect_and_centres_the_picture():
    from jetforge.apps.video.sinks.file import fit_frame

    frame = np.full((50, 100, 3), 7, np.uint8)
    assert fit_frame(frame, (100, 50)) is frame  # the right size is passed through untouched
    fitted = fit_frame(frame, (200, 200))  # scale min(2, 4) = 2 -> 200x100, bars of 50 above and below
    assert fitted.shape == (200, 200, 3)
    assert (fitted[50:150] == 7).all() and (fitted[:50] == 114).all() and (fitted[150:] == 114).all()


def test_mp4_sink_rejects_bad_frames(tmp_path):
    with pytest.raises(StreamError, match="HxWx3 uint8"):
        with Mp4Sink(tmp_path / "b.mp4", fps=10) as sink:
            sink.write(np.zeros((10, 10), np.float32))
    with pytest.raises(StreamError, match="frame rate must be positive"):
        Mp4Sink(tmp_path / "c.mp4", fps=0)
    assert list(tmp_path.iterdir()) == []


def test_json_lines_sink(tmp_path):
    out = tmp_path / "events.jsonl"
    with JsonLinesSink(out) as sink:
        sink.write({"frame": 0, "p": np.float32(0.5), "top": np.array([1, 2])})
        sink.write({"frame": 1})
    lines = out.read_text().splitlines()
    assert [json.loads(x) for x in lines] == [{"frame": 0, "p": 0.5, "top": [1, 2]}, {"frame": 1}]
    with pytest.raises(RuntimeError):
        with JsonLinesSink(tmp_path / "half.jsonl") as sink:
            sink.write({"frame": 0})
            raise RuntimeError("crash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl"]
