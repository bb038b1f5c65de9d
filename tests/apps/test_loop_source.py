"""`--loop` on a video file source: the file plays again from the start, frame numbers and timestamps keep
increasing, and the app run ends by --max-frames with every output consistent (used by the soak benchmark)."""

import json

import numpy as np
import pytest

from jetforge.cli.main import main
from jetforge.apps.video import open_source
from jetforge.apps.video.sources import SourceOptions
from jetforge.errors import ConfigError

FRAMES = 7


@pytest.fixture
def short_clip(tmp_path):
    """A 7-frame MP4 whose frames differ (a bright bar moves right), written with OpenCV."""
    import cv2

    path = tmp_path / "short.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (160, 120))
    for i in range(FRAMES):
        image = np.zeros((120, 160, 3), np.uint8)
        image[:, 20 * i:20 * i + 20] = 255
        writer.write(image)
    writer.release()
    return path


def test_loop_plays_the_file_again_with_increasing_numbers_and_times(short_clip):
    with open_source(short_clip, SourceOptions(loop=True)) as source:
        assert source.frame_count is None  # unbounded while looping
        frames = [source.read() for _ in range(3 * FRAMES + 2)]
        assert source.passes == 4
    assert [f.index for f in frames] == list(range(3 * FRAMES + 2))
    times = [f.timestamp for f in frames]
    assert all(b > a for a, b in zip(times, times[1:])), times
    # 10 fps: pass k starts where the previous one ended plus one frame period (tolerance: container rounding)
    assert times[FRAMES] == pytest.approx(times[FRAMES - 1] + 0.1, abs=1e-3)
    for k in range(FRAMES):  # pass 2 and 3 decode to the same pictures as pass 1
        np.testing.assert_array_equal(frames[k].image, frames[k + FRAMES].image)
        np.testing.assert_array_equal(frames[k].image, frames[k + 2 * FRAMES].image)
    # the bar really moves, so equal pictures mean the same frame, not a constant clip
    assert not np.array_equal(frames[0].image, frames[1].image)


def test_without_loop_the_file_ends_once(short_clip):
    with open_source(short_clip) as source:
        assert source.frame_count == FRAMES and len(list(source)) == FRAMES and source.truncated is None


def test_loop_is_refused_for_sources_that_are_not_files(tmp_path):
    (tmp_path / "frames").mkdir()
    with pytest.raises(ConfigError) as err:
        open_source(tmp_path / "frames", SourceOptions(loop=True))
    assert "--loop" in err.value.one_line()


def test_app_people_with_loop_stops_at_max_frames_with_consistent_outputs(short_clip, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["app", "people", "--source", str(short_clip), "--loop", "--max-frames", "17", "--out", str(out),
               "--no-plots", "-q", "--json"])
    assert rc == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["frames"] == 17
    records = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [r["frame"] for r in records if r["type"] == "people"] == list(range(17))
    import cv2

    cap = cv2.VideoCapture(str(out / "annotated.mp4"))
    decoded = 0
    while cap.read()[0]:
        decoded += 1
    cap.release()
    assert decoded == 17
