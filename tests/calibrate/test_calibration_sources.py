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


# ----------------------------------------------------------------- perceptual hash, near-duplicates
def _clip_hashes(asset, name, limit=None, step=1):
    from jetforge.assets import asset_path
    from jetforge.calibrate.phash import perceptual_hash
    from jetforge.errors import AssetError

    try:
        path = asset_path(asset, name)
    except AssetError as err:  # offline and not cached
        pytest.skip("real video not available: %s" % err)
    cap = cv2.VideoCapture(str(path))
    out, index = [], 0
    while limit is None or len(out) < limit:
        ok, frame = cap.read()
        if not ok:
            break
        if index % step == 0:
            out.append(perceptual_hash(frame))
        index += 1
    cap.release()
    return out


def test_hamming_distances_match_a_bit_by_bit_reference():
    from jetforge.calibrate.phash import distance_matrix, hamming, nearest

    rng = np.random.default_rng(4)
    a = [int(x) for x in rng.integers(0, 2 ** 63, 20, dtype=np.uint64)] + [2 ** 64 - 1, 0]
    b = [int(x) for x in rng.integers(0, 2 ** 63, 15, dtype=np.uint64)] + [a[3]]
    ref = np.array([[sum(((x >> k) & 1) != ((y >> k) & 1) for k in range(64)) for y in b] for x in a])
    assert np.array_equal(distance_matrix(a, b), ref)
    assert hamming(a[-2], a[-1]) == 64 and hamming(a[3], b[-1]) == 0
    dist, where = nearest(a, b, chunk=7)  # chunking does not change the answer
    assert np.array_equal(dist, ref.min(axis=1)) and dist[3] == 0 and where[3] == len(b) - 1


def test_threshold_separates_consecutive_frames_from_other_clips():
    """The measurement behind NEAR_DUPLICATE_BITS, on a subset: consecutive frames of vtest.avi are within it,
    frames of another clip are far outside it (the full measurement found a closest unrelated pair at 14)."""
    from jetforge.calibrate.phash import NEAR_DUPLICATE_BITS, distance_matrix, hamming

    street = _clip_hashes("opencv_samples", "vtest.avi", limit=120)
    other = _clip_hashes("opencv_samples", "Megamind.avi", limit=120, step=2)
    consecutive = [hamming(x, y) for x, y in zip(street, street[1:])]
    assert max(consecutive) <= NEAR_DUPLICATE_BITS
    assert int(distance_matrix(street, other).min()) >= NEAR_DUPLICATE_BITS + 6


def test_hash_survives_reencoding_resizing_and_brightness(real_frames):
    from jetforge.calibrate.phash import NEAR_DUPLICATE_BITS, hamming, perceptual_hash

    frames = real_frames[::8]
    for f in frames:
        h = perceptual_hash(f)
        ok, jpg = cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, 40])
        variants = [cv2.imdecode(jpg, cv2.IMREAD_COLOR), cv2.convertScaleAbs(f, alpha=1.0, beta=25),
                    cv2.resize(f, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA), cv2.cvtColor(f, cv2.COLOR_BGR2GRAY)]
        assert all(hamming(h, perceptual_hash(v)) <= NEAR_DUPLICATE_BITS for v in variants)
    # the street frames 7*8 = 56 frames apart are other images; the photo crops are unrelated to the street
    hashes = [perceptual_hash(f) for f in frames]
    assert hamming(hashes[0], hashes[-1]) > NEAR_DUPLICATE_BITS


def test_quality_tracker_hashes_as_the_evaluation_side_does(real_frames):
    from jetforge.calibrate.phash import perceptual_hash

    tracker = QualityTracker()
    for i, f in enumerate(real_frames[:6]):
        tracker.update("f%d" % i, f)
    assert tracker.hashes == [("f%d" % i, perceptual_hash(f)) for i, f in enumerate(real_frames[:6])]
    # and the quality measures are those of the same thumbnail as before (std of a flat image is 0)
    assert QualityTracker.measure(np.full((300, 400, 3), 77, np.uint8)) == (0.0, 1.0)


def test_evaluation_uses_every_sample_unless_told_and_says_so(image_dir, preprocess, caplog):
    from jetforge.calibrate.eval_data import gather, sample_bytes

    import logging

    with caplog.at_level(logging.INFO, logger="jetforge.calibrate.eval_data"):
        every = gather([image_dir], preprocess)
    assert every.used == every.available == 40 and every.limit == "all" and not every.warnings
    assert sum(len(b) for b in every.batches) == 40 and len(every.hashes) == 40
    assert "evaluation: 40 of 40 available samples (all)" in caplog.text
    some = gather([image_dir], preprocess, samples=10)
    assert some.used == 10 and some.available == 40 and some.limit == "--eval-samples 10" and not some.warnings
    # past the memory budget: evenly spread samples and a warning that says how many of how many
    capped = gather([image_dir], preprocess, memory_bytes=12 * sample_bytes(preprocess))
    assert capped.used == 12 and capped.available == 40 and capped.limit.startswith("memory: 12 preprocessed")
    assert capped.warnings == ["evaluation: 12 of 40 available samples (%s)" % capped.limit]
    assert capped.names == [n for n in every.names if n in set(capped.names)]  # spread, in order
    assert capped.names[0] == every.names[0] and capped.names[-1] == every.names[-1]


def test_held_out_check_counts_near_duplicates(image_dir, bikes_video, preprocess):
    from jetforge.calibrate.eval_data import check_held_out, gather

    calibration = QualityTracker()
    for name, image in collect_sources(image_dir, max_samples=40):
        calibration.update(name, image)
    # the same clip the folder's frames were taken from: every 7th frame is in the folder
    same_clip = gather([bikes_video], preprocess, samples=50)
    block = check_held_out(same_clip, calibration.hashes)
    assert block["compared"] == 50 and block["against"] == 40 and block["with_near_duplicate"] >= 10
    assert same_clip.warnings and "not held-out" in same_clip.warnings[-1]
    pair = block["examples"][0]
    assert "e.g. %s ~ %s" % (pair["evaluation"], pair["calibration"]) in same_clip.warnings[-1]
    # the same block read under other names (as mixed precision's report/selection splits are)
    from jetforge.calibrate.phash import describe

    assert "e.g. %s ~ %s" % (pair["evaluation"], pair["calibration"]) in describe(block, "report", "selection")
    # another clip: nothing in common
    from jetforge.assets import asset_path
    from jetforge.errors import AssetError

    try:
        street = asset_path("opencv_samples", "vtest.avi")
    except AssetError as err:  # offline and not cached
        pytest.skip("real video not available: %s" % err)
    other = gather([street], preprocess, samples=50)
    block = check_held_out(other, calibration.hashes)
    assert block["with_near_duplicate"] == 0 and block["examples"] == [] and not other.warnings
