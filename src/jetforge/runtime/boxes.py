"""Box geometry shared by the apps' trackers and the training recipes that derive labels from tracks."""

from typing import List, Tuple

import numpy as np


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` (N, 4) with every box in ``b`` (M, 4); boxes are x1, y1, x2, y2."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def greedy_match(iou: np.ndarray, threshold: float) -> Tuple[List[Tuple[int, int]], List[int], List[int]]:
    """Pairs (row, col) by decreasing IoU, each at least ``threshold``; then unmatched rows and cols."""
    rows, cols = iou.shape
    pairs: List[Tuple[int, int]] = []
    if rows and cols:
        order = np.argsort(-iou, axis=None, kind="stable")
        used_r, used_c = set(), set()
        for flat in order:
            r, c = divmod(int(flat), cols)
            if iou[r, c] < threshold:
                break
            if r in used_r or c in used_c:
                continue
            used_r.add(r)
            used_c.add(c)
            pairs.append((r, c))
    matched_r = {r for r, _ in pairs}
    matched_c = {c for _, c in pairs}
    return pairs, [r for r in range(rows) if r not in matched_r], [c for c in range(cols) if c not in matched_c]
