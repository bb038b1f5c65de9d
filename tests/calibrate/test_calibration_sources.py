import numpy as np
import pytest

from jetforge.calibrate.quality import QualityTracker
from jetforge.calibrate.sources import allocate, collect_sources, evenly_spaced
from jetforge.errors import CalibrationError, InputFileError

cv2 = pytest.importorskip("cv2")


def test_image_folder_and_budget(image_dir):
    samples = collect_sources(image_dir, max_samples=10)
    items = list(samples)
    assert samples.total == 10 and len(items) == 10
    assert all(im.dtype == np.uint8 and im.ndim == 3 for _, im in items)
    names = [n for n, _ in items]
    assert names == sorted(names) and len(set(names)) == 10  # evenly spread, no repeats


def test_uniform_video_sampling(bikes_video):
    samples = collect_sources(bikes_video, max_samples=12)
    items = list(samples)
    idx = [int(n.rsplit("#", 1)[1]) for n, _ in items]
    assert len(items) == 12 and idx[0] == 0 and idx[-1] >= 240
    assert items[0][1].shape == (272, 640, 3)
    assert np.diff(idx).min() >= 20


def test_scene_sampling_picks_changes(bikes_video):
    samples = collect_sources(bikes_video, max_samples=8, sampling="scene")
    items = list(samples)
    assert 1 <= len(items) <= 8
    idx = [int(n.rsplit("#", 1)[1]) for n, _ in items]
    assert idx == sorted(set(idx))


def test_path_list_and_mixed_sources(tmp_path, image_dir, bikes_video):
    files = sorted(image_dir.glob("*.jpg"))[:3]
    lst = tmp_path / "list.txt"
    lst.write_text("# calibration set\n" + "\n".join(str(f) for f in files) + "\n" + str(bikes_video) + "\n")
    samples = collect_sources([lst], max_samples=7)
    assert [s.kind for s in samples.sources] == ["images", "video"]
    assert samples.plan == [3, 4]  # the list's 3 images, the video tops up
    assert len(list(samples)) == 7


def test_empty_folder_is_clear(tmp_path):
    (tmp_path / "notes.md").write_text("nothing here")
    with pytest.raises(CalibrationError, match="has no images or videos"):
        collect_sources(tmp_path)


def test_unreadable_video_is_clear(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00\x01not a video" * 100)
    with pytest.raises(CalibrationError, match="broken.mp4"):
        collect_sources(bad)


def test_missing_path(tmp_path):
    with pytest.raises(InputFileError, match="does not exist"):
        collect_sources(tmp_path / "nope")


def test_allocate():
    assert allocate([100, 100], 10) == [5, 5]
    assert allocate([2, 100], 10) == [2, 8]
    assert allocate([3, 3], 10) == [3, 3]
    assert evenly_spaced(10, 3) == [0, 4, 9] or evenly_spaced(10, 3) == [0, 5, 9]


def test_quality_checks(real_frames):
    good = QualityTracker()
    for i, f in enumerate(real_frames):
        good.update("real%d" % i, f)
    report = good.check(min_samples=16)
    assert not report.near_constant and not report.noise_like
    assert any("500" in w for w in report.warnings)  # fewer than TensorRT's guidance
    with pytest.raises(CalibrationError, match="only %d calibration samples" % len(real_frames)):
        good.check(min_samples=100)

    rng = np.random.default_rng(0)
    noisy = QualityTracker()
    for i, f in enumerate(real_frames[:20]):
        noisy.update("real%d" % i, f)
    for i in range(3):
        noisy.update("noise%d" % i, rng.integers(0, 256, (120, 160, 3), dtype=np.uint8))
        noisy.update("black%d" % i, np.full((120, 160, 3), 3, np.uint8))
    report = noisy.check(min_samples=16)
    assert len(report.noise_like) == 3 and len(report.near_constant) == 3
    assert any("noise-like" in w for w in report.warnings) and any("near-constant" in w for w in report.warnings)

    mostly_noise = QualityTracker()
    for i in range(20):
        mostly_noise.update("noise%d" % i, rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    with pytest.raises(CalibrationError, match="20 of 20 calibration samples are noise-like"):
        mostly_noise.check(min_samples=16)
