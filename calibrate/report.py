"""The calibration report: JSON (what was done, per-tensor ranges, data checks) and histogram plots.

Plots show each tensor's ``|x|`` histogram (log counts) with the chosen threshold and the
observed max, 16 tensors to a PNG page; matplotlib is imported only when plotting.
"""

import logging
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from jetforge.calibrate.histogram import StreamingHistogram
from jetforge.fileio import PathLike, atomic_output, write_json_atomic
from jetforge.optional import require

log = logging.getLogger(__name__)

REPORT_FORMAT = 1
PER_PAGE = 16


def tensor_rows(hists: Dict[str, StreamingHistogram], amax: Dict[str, float]) -> List[Dict[str, object]]:
    rows = []
    for name, h in hists.items():
        a = amax.get(name)
        clipped = None
        if a is not None and h.width and h.count:
            first_clipped = int(math.ceil(a / h.width - 1e-9))
            clipped = float(h.counts[first_clipped:].sum()) / float(h.count) if first_clipped < len(h.counts) else 0.0
        row = {"name": name, "amax": a, "scale": (a / 127.0) if a else None, "observed_amax": h.amax,
               "clip_ratio": (a / h.amax) if (a is not None and h.amax) else None, "clipped_fraction": clipped}
        row.update({k: v for k, v in h.summary().items() if k in ("count", "bins", "bin_width", "min", "max", "mean",
                                                                   "std", "nonfinite")})
        rows.append(row)
    return rows


def build_report(**sections) -> Dict[str, object]:
    import jetforge

    report: Dict[str, object] = {"format": REPORT_FORMAT, "tool": "jetforge", "version": jetforge.__version__}
    report.update(sections)
    return report


def write_report(path: PathLike, report: Dict[str, object]) -> Path:
    return write_json_atomic(path, report)


def plot_histograms(hists: Dict[str, StreamingHistogram], amax: Dict[str, float], out_dir: PathLike,
                    names: Optional[Sequence[str]] = None, title: str = "", per_page: int = PER_PAGE) -> List[Path]:
    """PNG pages of per-tensor histograms with the chosen threshold; returns the written files."""
    matplotlib = require("matplotlib", "calibration histogram plots")
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    names = [n for n in (names or list(hists)) if n in hists and hists[n].width]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: List[Path] = []
    for page, start in enumerate(range(0, len(names), per_page)):
        chunk = names[start:start + per_page]
        cols = int(math.ceil(math.sqrt(len(chunk))))
        rows = int(math.ceil(len(chunk) / cols))
        fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.6 * rows), squeeze=False)
        for ax in axes.ravel()[len(chunk):]:
            ax.axis("off")
        for ax, name in zip(axes.ravel(), chunk):
            h = hists[name]
            edges = h.edges()
            counts = h.counts.astype(np.float64)
            ax.fill_between(edges[:-1], np.maximum(counts, 0.8), step="post", color="tab:blue", alpha=0.7, lw=0)
            ax.set_yscale("log")
            a = amax.get(name)
            if a is not None:
                ax.axvline(a, color="tab:red", lw=1.2, label="amax %.4g" % a)
            ax.axvline(h.amax, color="tab:gray", lw=0.8, ls="--", label="max %.4g" % h.amax)
            ax.set_title(name if len(name) <= 40 else "..." + name[-37:], fontsize=7)
            ax.tick_params(labelsize=6)
            ax.legend(fontsize=6, loc="upper right")
        if title:
            fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        target = out / ("histograms_%02d.png" % page)
        with atomic_output(target) as tmp:
            fig.savefig(str(tmp), dpi=80, format="png")
        plt.close(fig)
        written.append(target)
    return written
