"""Fashion-MNIST from its IDX files, as torch Datasets and DataLoaders (single process or DDP).

The four gzip IDX files come from the asset cache (``jetforge assets fetch fashion_mnist``).
Callers resolve the folder through the asset store (:mod:`jetforge.assets`, in the root layer every layer may
import: docs/architecture.md), so a folder of one's own works the same way::

    from jetforge.assets import asset_path
    root = asset_path("fashion_mnist", "train-images-idx3-ubyte.gz").parent
    train = fashion_mnist(root, "train", augment=True)
    loader = make_loader(train, batch_size=128, shuffle=True)   # DistributedSampler under torchrun

The images stay in memory as one uint8 tensor (47 MB for the 60k training images); a batch is
gathered, normalised (``(x/255 - 0.2860) / 0.3530``) and optionally flipped in one vectorised step
(``__getitems__``), so loading costs nothing next to the model even on 2 CPU cores.
"""

import gzip
import logging
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import InputFileError
from jetforge.fileio import PathLike, require_file
from jetforge.optional import require

log = logging.getLogger(__name__)

FILES: Dict[str, Tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
CLASSES: List[str] = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                      "Ankle boot"]
MEAN = 0.2860  # of the 60k training images, in [0, 1]
STD = 0.3530
FETCH_HINT = "fetch the files with `jetforge assets fetch fashion_mnist` and pass that folder " \
             "(`jetforge assets path fashion_mnist train-images-idx3-ubyte.gz` shows it)"

_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: PathLike) -> np.ndarray:
    """An IDX file (gzip or plain) as a numpy array; a damaged or foreign file gives a clear error."""
    p = require_file(path, "IDX file", hint=FETCH_HINT)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(str(p), "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as err:
        raise InputFileError("cannot read %s: %s" % (p, err), hint="re-fetch the file; it is damaged") from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise InputFileError("%s is not an IDX file (bad magic number)" % p,
                             hint="give the Fashion-MNIST *-idx?-ubyte.gz files")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise InputFileError("%s is truncated (header)" % p, hint="re-fetch the file")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    count = int(np.prod(dims)) if dims else 1
    if len(raw) - header != count * dtype.itemsize:
        raise InputFileError("%s is truncated or padded: %d data bytes for shape %s"
                             % (p, len(raw) - header, tuple(dims)), hint="re-fetch the file")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def check_root(root: Optional[PathLike]) -> Path:
    """The folder holding the four Fashion-MNIST files, or an error naming what is missing."""
    if root is None:
        raise InputFileError("no Fashion-MNIST folder was given", hint=FETCH_HINT)
    folder = Path(root)
    missing = [name for pair in FILES.values() for name in pair if not (folder / name).is_file()]
    if missing:
        raise InputFileError("Fashion-MNIST folder %s lacks %s" % (folder, ", ".join(missing)), hint=FETCH_HINT)
    return folder


def load_fashion_mnist(root: PathLike, split: str = "train") -> Tuple[np.ndarray, np.ndarray]:
    """``(images uint8 [N, 28, 28], labels int64 [N])`` of ``split`` ("train": 60000, "test": 10000)."""
    if split not in FILES:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("Fashion-MNIST split", split, FILES)
    folder = check_root(root)
    images = read_idx(folder / FILES[split][0])
    labels = read_idx(folder / FILES[split][1]).astype(np.int64)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise InputFileError("Fashion-MNIST %s files disagree: images %s, labels %s"
                             % (split, images.shape, labels.shape), hint="re-fetch the files")
    if labels.min() < 0 or labels.max() >= len(CLASSES):
        raise InputFileError("Fashion-MNIST %s labels are outside 0..9" % split, hint="re-fetch the files")
    return images, labels


def normalize(images: np.ndarray) -> np.ndarray:
    """uint8 [N, 28, 28] -> float32 [N, 1, 28, 28], the model input (ONNX Runtime / calibration side)."""
    x = images.astype(np.float32) / 255.0
    return ((x - MEAN) / STD)[:, None, :, :]


def subset_indices(n: int, limit: Optional[int], seed: int = 0, stratify: Optional[np.ndarray] = None) -> np.ndarray:
    """``limit`` indices out of ``n`` (all when None), a fixed random draw, class-balanced when labels are given."""
    if limit is None or limit >= n:
        return np.arange(n)
    if limit < 1:
        raise ValueError("limit must be positive, got %r" % limit)
    rng = np.random.default_rng(seed)
    if stratify is None:
        return np.sort(rng.permutation(n)[:limit])
    classes = np.unique(stratify)
    per = [np.flatnonzero(stratify == c) for c in classes]
    picks = [rng.permutation(ix)[:max(1, limit // len(classes))] for ix in per]
    out = np.concatenate(picks)
    if len(out) < limit:  # top up from what is left
        rest = np.setdiff1d(np.arange(n), out)
        out = np.concatenate([out, rng.permutation(rest)[:limit - len(out)]])
    return np.sort(out[:limit])


class ArrayDataset:
    """Images (uint8, [N, H, W]) and labels in memory; items are normalised float tensors [1, H, W]."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, augment: bool = False, mean: float = MEAN,
                 std: float = STD, seed: int = 0) -> None:
        torch = require("torch", "training datasets")
        self.images = torch.from_numpy(np.ascontiguousarray(images))
        self.labels = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        self.augment = bool(augment)
        self.mean, self.std = float(mean), float(std)
        self._gen = torch.Generator().manual_seed(int(seed))

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def _prepare(self, index: Any):
        torch = require("torch", "training datasets")
        x = self.images[index].to(torch.float32).div_(255.0).sub_(self.mean).div_(self.std)
        if x.dim() == 2:
            x = x.unsqueeze(0)
        else:
            x = x.unsqueeze(1)
        if self.augment:  # random horizontal flip: every Fashion-MNIST class is left/right symmetric
            if x.dim() == 3:
                if bool(torch.rand((), generator=self._gen) < 0.5):
                    x = x.flip(-1)
            else:
                flip = torch.rand(x.shape[0], generator=self._gen) < 0.5
                x[flip] = x[flip].flip(-1)
        return x

    def __getitem__(self, index: int):
        return self._prepare(int(index)), self.labels[int(index)]

    def __getitems__(self, indices: Sequence[int]):
        torch = require("torch", "training datasets")
        ix = torch.as_tensor(list(indices), dtype=torch.long)
        return self._prepare(ix), self.labels[ix]


def fashion_mnist(root: PathLike, split: str = "train", limit: Optional[int] = None, augment: bool = False,
                  seed: int = 0) -> ArrayDataset:
    """A Fashion-MNIST split as a Dataset; ``limit`` keeps a fixed class-balanced subset (for tests)."""
    images, labels = load_fashion_mnist(root, split)
    keep = subset_indices(len(labels), limit, seed=seed, stratify=labels)
    return ArrayDataset(images[keep], labels[keep], augment=augment, seed=seed)


def _collate(data: Any) -> Any:
    """``__getitems__`` already returns a batch; single items (no ``__getitems__``) are stacked."""
    torch = require("torch", "training datasets")
    if isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], torch.Tensor) and data[0].dim() >= 4:  # images or clips
        return data
    from torch.utils.data import default_collate

    return default_collate(data)


def make_loader(dataset: Any, batch_size: int, shuffle: bool = False, distributed: Optional[bool] = None,
                seed: int = 0, drop_last: bool = False, workers: int = 0):
    """A DataLoader; under an initialised ``torch.distributed`` a DistributedSampler shards the data.

    For training (``shuffle=True``) call ``loader.sampler.set_epoch(epoch)`` each epoch when it has one
    (:class:`jetforge.compress.train.Trainer` does).  For evaluation under DDP use :func:`shard_indices`
    instead: DistributedSampler pads the last shard with repeated samples, which would bias metrics.
    """
    torch = require("torch", "training data loaders")
    from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

    if batch_size < 1:
        raise ValueError("batch_size must be positive, got %r" % batch_size)
    dist = torch.distributed
    if distributed is None:
        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if distributed:
        sampler = DistributedSampler(dataset, shuffle=shuffle, seed=seed, drop_last=drop_last)
    elif shuffle:
        sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    else:
        sampler = SequentialSampler(dataset)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, collate_fn=_collate,
                      num_workers=workers, persistent_workers=workers > 0)


def shard_indices(n: int, rank: int, world: int) -> List[int]:
    """Rank ``rank``'s share of ``range(n)`` without padding (evaluation under DDP sums the shards)."""
    return list(range(rank, n, world))


__all__ = ["ArrayDataset", "CLASSES", "FILES", "MEAN", "STD", "check_root", "fashion_mnist", "load_fashion_mnist",
           "make_loader", "normalize", "read_idx", "shard_indices", "subset_indices"]
