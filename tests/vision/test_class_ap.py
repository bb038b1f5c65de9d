"""class_bootstrap: one class gives paired_bootstrap's numbers exactly; two classes give the mean of the per-class APs,
each equal to evaluate_ap on that class alone (the independent single-class path)."""

import numpy as np

from jetforge.vision.detection_metrics import class_bootstrap, evaluate_ap, paired_bootstrap


def _sets(seed, classes):
    rng = np.random.default_rng(seed)

    def jitter(g, s):
        c = g[:, :2] + rng.normal(0, s, (len(g), 2))
        return np.hstack([c, c + (g[:, 2:] - g[:, :2]) * rng.uniform(0.8, 1.2, (len(g), 2))])

    gt, a, b = [], [], []
    for _ in range(24):
        corner = rng.uniform(0, 100, (5, 2))
        g = np.hstack([corner, corner + rng.uniform(10, 40, (5, 2))])
        k = rng.integers(0, classes, 5)
        gt.append((g, np.zeros(5, bool), k))
        a.append((jitter(g, 3), rng.uniform(0, 1, 5), k))
        b.append((jitter(g, 6), rng.uniform(0, 1, 5), k))
    return [list(x) for x in zip(*gt)], [list(x) for x in zip(*a)], [list(x) for x in zip(*b)]


def test_one_class_is_paired_bootstrap():
    gt, a, b = _sets(0, 1)
    groups = [i // 4 for i in range(24)]
    want = paired_bootstrap(gt[0], gt[1], a[:2], b[:2], n_resamples=150, groups=groups)
    got = class_bootstrap(gt, a, b, [0], n_resamples=150, groups=groups)["mean"]
    for side in ("a", "b", "difference"):
        for key in ("ap50", "ap", "ap50_ci", "ap_ci"):
            assert got[side][key] == want[side][key]


def test_the_mean_is_the_mean_of_each_class_alone():
    gt, a, b = _sets(1, 2)
    got = class_bootstrap(gt, a, b, [0, 1], n_resamples=20)
    alone = []
    for c in (0, 1):
        pick = lambda s, k: [np.asarray(x)[np.asarray(k_) == c] for x, k_ in zip(s, k)]  # noqa: E731
        r = evaluate_ap(pick(gt[0], gt[2]), pick(gt[1], gt[2]), pick(a[0], a[2]), pick(a[1], a[2]))
        assert got["classes"][c]["a"]["ap50"] == r.ap50
        alone.append(r.ap50)
    assert abs(got["mean"]["a"]["ap50"] - np.mean(alone)) < 1e-12
