"""The detection bootstrap's fast paths give the same intervals as before, and a long bootstrap shows progress.

* ``resampled_ap`` (the bootstrap's inner loop, from the true positives alone) against ``ap_per_threshold`` (the
  definition: every detection, ``interpolated_ap`` per threshold) on random frames with difficult boxes, unmatched
  and empty frames, a height range, and whole-number weights with zeros: equal to the last bit.
* ``class_bootstraps`` (frames matched once for several resampling units) against separate ``class_bootstrap``
  calls: equal.
* Fixed seed: intervals recorded from the code before these changes (``repr`` of each float, seed 3, 120
  resamples, four classes, 30 frames) are reproduced exactly.
* Progress: a bar on stderr only when asked for and the bootstrap is long (``PROGRESS_APS``).
"""

import numpy as np
import pytest

from jetforge.vision import detection_metrics as dm


def _sets(seed=5, classes=4, frames=30):
    """Ground truth (boxes, difficult, classes) and two detectors' (boxes, scores, classes) per frame: jittered copies
    of most boxes, some misses and false alarms, frames without boxes."""
    rng = np.random.default_rng(seed)
    gt, a, b = [], [], []
    for _ in range(frames):
        n = int(rng.integers(0, 7))
        corner = rng.uniform(0, 200, (n, 2))
        g = np.hstack([corner, corner + rng.uniform(8, 60, (n, 2))])
        k = rng.integers(0, classes, n)
        hard = rng.random(n) < 0.15
        gt.append((g, hard, k))
        for side, noise in ((a, 4.0), (b, 9.0)):
            keep = rng.random(n) < 0.85
            c = g[keep, :2] + rng.normal(0, noise, (int(keep.sum()), 2))
            d = np.hstack([c, c + (g[keep, 2:] - g[keep, :2]) * rng.uniform(0.8, 1.2, (int(keep.sum()), 2))])
            m = int(rng.integers(0, 4))
            e0 = rng.uniform(0, 200, (m, 2))
            d = np.vstack([d, np.hstack([e0, e0 + rng.uniform(8, 60, (m, 2))])])
            kk = np.concatenate([k[keep], rng.integers(0, classes, m)])
            side.append((d, rng.uniform(0, 1, len(d)), kk))
    return [list(x) for x in zip(*gt)], [list(x) for x in zip(*a)], [list(x) for x in zip(*b)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_resampled_ap_is_ap_per_threshold_to_the_last_bit(seed):
    rng = np.random.default_rng(seed)
    gt, a, _ = _sets(seed, classes=1, frames=25)
    for height_range in (None, (30.0, 50.0)):
        ranked = dm.rank_detections(gt[0], gt[1], a[0], [np.round(s, 1) for s in a[1]],  # tied scores too
                                    height_range=height_range)
        draws = [rng.multinomial(25, np.full(25, 1 / 25)) for _ in range(40)]
        draws += [np.zeros(25), np.eye(25)[3] * 2, np.ones(25)]  # nothing drawn; one frame twice; every frame once
        for w in draws:
            want = dm.ap_per_threshold(ranked, w)
            got = dm.resampled_ap(ranked, w)
            assert np.array_equal(got, want, equal_nan=True), (w, got - want)
    empty = dm.rank_detections([np.zeros((0, 4))], None, [np.zeros((0, 4))], [np.zeros(0)])  # no box, no detection
    assert np.isnan(dm.resampled_ap(empty, np.ones(1))).all()
    missed = dm.rank_detections([np.array([[0, 0, 10, 10.0]])], None, [np.array([[50, 50, 60, 60.0]])], [[0.5]])
    assert np.array_equal(dm.resampled_ap(missed, np.ones(1)), dm.ap_per_threshold(missed, np.ones(1)))


def test_several_units_at_once_equal_separate_calls():
    gt, a, b = _sets()
    groups = ["g%d" % (i // 4) for i in range(30)]
    together = dm.class_bootstraps(gt, a, b, [0, 1, 2, 3], [None, groups], n_resamples=60, seed=1)
    assert together == [dm.class_bootstrap(gt, a, b, [0, 1, 2, 3], n_resamples=60, seed=1),
                        dm.class_bootstrap(gt, a, b, [0, 1, 2, 3], n_resamples=60, seed=1, groups=groups)]


def test_intervals_of_a_fixed_seed_are_those_recorded_before_the_change():
    gt, a, b = _sets()
    groups = ["g%d" % (i // 4) for i in range(30)]
    frames = dm.class_bootstrap(gt, a, b, [0, 1, 2, 3], n_resamples=120, seed=3)
    assert frames["mean"]["a"]["ap50_ci"] == [0.2849124560214992, 0.4245258008044645]
    assert frames["mean"]["b"]["ap_ci"] == [0.0185265321328585, 0.05165047312452512]
    assert frames["mean"]["difference"]["ap50_ci"] == [0.12841414853714922, 0.30533668233663086]
    assert frames["mean"]["difference"]["ap_ci"] == [0.0610912580851455, 0.1336302243298069]
    assert frames["classes"][2]["a"]["ap_ci"] == [0.09211299879988, 0.3251111755744157]
    assert frames["mean"]["a"]["ap50"] == 0.32324873758718947 and frames["mean"]["b"]["ap"] == 0.029026623003508473
    grouped = dm.class_bootstrap(gt, a, b, [0, 1, 2, 3], n_resamples=120, seed=3, groups=groups)
    assert grouped["units"] == 8
    assert grouped["mean"]["difference"]["ap50_ci"] == [0.02606845536136955, 0.31321362786003953]
    assert grouped["mean"]["difference"]["ap_ci"] == [0.037213401354769776, 0.10783703724588696]
    one_side = dm.class_bootstrap(gt, a, None, [0, 1, 2, 3], n_resamples=120, seed=3)
    assert one_side["mean"] == {"a": frames["mean"]["a"]}
    paired = dm.paired_bootstrap(gt[0], gt[1], a[:2], b[:2], n_resamples=120, seed=3, groups=groups)["difference"]
    assert paired["ap50_ci"] == [0.057249028606524886, 0.28346381492751366]
    assert paired["ap_ci"] == [0.04510835666895778, 0.10163883042483743]


def test_a_long_bootstrap_shows_progress(monkeypatch, capsys):
    gt, a, b = _sets(frames=12)
    dm.class_bootstrap(gt, a, b, [0, 1, 2, 3], n_resamples=30, progress=True)  # 240 AP evaluations: short, no bar
    assert "bootstrap" not in capsys.readouterr().err
    monkeypatch.setattr(dm, "PROGRESS_APS", 200)
    quiet = dm.class_bootstrap(gt, a, b, [0, 1, 2, 3], n_resamples=30)  # not asked for (--json): no bar
    assert "bootstrap" not in capsys.readouterr().err
    shown = dm.class_bootstraps(gt, a, b, [0, 1, 2, 3], [None, [i // 3 for i in range(12)]], n_resamples=30,
                                progress=True)
    err = capsys.readouterr().err
    assert "bootstrap over images" in err and "bootstrap over groups" in err
    assert shown[0] == quiet  # the bar changes nothing
