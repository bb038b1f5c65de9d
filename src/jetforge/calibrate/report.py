"""The calibration report: JSON (what was done, per-tensor ranges, data checks) and histogram plots.

Plots (matplotlib, imported only when plotting), cheap enough not to dominate a calibration run:

* ``overview.png`` -- every tensor at once: one row per tensor (graph order, numbered as the report's
  ``tensors`` list), its ``|x|`` distribution over ``[0, observed max]`` as log-scaled colour, and a
  red mark where the chosen range ends -- tensors whose range cuts deep stand out;
* ``histograms_NN.png`` -- 16 tensors to a page, each ``|x|`` histogram (log counts) with the chosen
  threshold (red) and the observed max (grey); by default one page with the tensors whose chosen
  range cuts the most off the observed one (:func:`most_clipped`), every tensor on request.

Drawing is kept cheap on purpose (measured: 7 pages of MobileNetV2's 101 tensors cost 50 s on a
2-core CPU with pyplot, tight layout, legends and every one of up to 8192 bins drawn): no pyplot
state, a fixed layout, at most :data:`DISPLAY_BINS` bars per histogram (finer than the pixels of a
panel), limits set instead of autoscaled, no minor log ticks, the numbers in the panel title.
"""

import logging
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from jetforge.calibrate.histogram import StreamingHistogram
from jetforge.fileio import PathLike, write_json_atomic, write_png_atomic
from jetforge.optional import require

log = logging.getLogger(__name__)

REPORT_FORMAT = 1
PER_PAGE = 16
DISPLAY_BINS = 256


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


def new_figure(width: float, height: float):
    """A matplotlib Figure with an Agg canvas, without pyplot's global state."""
    require("matplotlib", "calibration histogram plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def save_png(fig, target: Path, dpi: int = 80) -> Path:
    return write_png_atomic(fig, target, dpi=dpi, layout=False)


def display_counts(h: StreamingHistogram, bins: int) -> "tuple":
    """(counts, bin width) of ``h`` with neighbouring bins summed to at most ``bins`` bars."""
    factor = max(1, int(math.ceil(len(h.counts) / float(bins))))
    c = h.counts
    if factor > 1:
        c = np.concatenate([c, np.zeros((-len(c)) % factor, dtype=c.dtype)]).reshape(-1, factor).sum(axis=1)
    return c, h.width * factor


def most_clipped(hists: Dict[str, StreamingHistogram], amax: Dict[str, float], count: int = PER_PAGE) -> List[str]:
    """The ``count`` tensors whose chosen range is the smallest fraction of the observed max, in graph order."""
    ratio = {n: amax[n] / h.amax for n, h in hists.items() if h.width and h.amax > 0 and amax.get(n) is not None}
    keep = set(sorted(ratio, key=lambda n: (ratio[n], n))[:count])
    return [n for n in hists if n in keep]


def plot_histograms(hists: Dict[str, StreamingHistogram], amax: Dict[str, float], out_dir: PathLike,
                    names: Optional[Sequence[str]] = None, title: str = "", per_page: int = PER_PAGE,
                    bins: int = DISPLAY_BINS) -> List[Path]:
    """PNG pages of per-tensor histograms with the chosen threshold; returns the written files."""
    require("matplotlib", "calibration histogram plots")
    from matplotlib.ticker import LogLocator, MaxNLocator, NullLocator

    names = [n for n in (names if names is not None else list(hists)) if n in hists and hists[n].width]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: List[Path] = []
    for page, start in enumerate(range(0, len(names), per_page)):
        chunk = names[start:start + per_page]
        cols = int(math.ceil(math.sqrt(len(chunk))))
        rows = int(math.ceil(len(chunk) / cols))
        fig = new_figure(3.6 * cols, 2.6 * rows)
        axes = np.asarray(fig.subplots(rows, cols, squeeze=False))
        fig.subplots_adjust(left=0.05, right=0.99, bottom=0.06, top=0.88 if title else 0.93, wspace=0.25,
                            hspace=0.6)
        for ax in axes.ravel()[len(chunk):]:
            ax.axis("off")
        for ax, name in zip(axes.ravel(), chunk):
            h = hists[name]
            counts, width = display_counts(h, bins)
            y = np.maximum(counts.astype(np.float64), 0.8)
            x = np.arange(len(y)) * width
            ax.fill_between(x, y, 0.8, step="post", color="tab:blue", alpha=0.7, lw=0)
            ax.set_yscale("log")
            ax.set_xlim(0.0, max(len(y) * width, h.amax) * 1.02)
            ax.set_ylim(0.8, float(y.max()) * 2.0)
            ax.yaxis.set_major_locator(LogLocator(numticks=4))
            ax.yaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_locator(MaxNLocator(4))
            a = amax.get(name)
            if a is not None:
                ax.axvline(a, color="tab:red", lw=1.2)
            ax.axvline(h.amax, color="tab:gray", lw=0.8, ls="--")
            short = name if len(name) <= 44 else "..." + name[-41:]
            ax.set_title("%s\namax %s, max %.4g" % (short, "%.4g" % a if a is not None else "-", h.amax), fontsize=7)
            ax.tick_params(labelsize=6)
        if title:
            fig.suptitle(title, fontsize=9)
        written.append(save_png(fig, out / ("histograms_%02d.png" % page)))
    return written


def plot_overview(hists: Dict[str, StreamingHistogram], amax: Dict[str, float], target: PathLike,
                  title: str = "", columns: int = 128) -> Path:
    """Every tensor in one image: rows = tensors, columns = ``|x|`` / observed max, colour = log10 fraction."""
    names = list(hists)
    grid = np.full((max(len(names), 1), columns), np.nan)
    marks = []
    for row, name in enumerate(names):
        h = hists[name]
        if not (h.width and h.count):
            continue
        centers = (np.arange(len(h.counts)) + 0.5) * h.width / h.amax if h.amax > 0 else np.zeros(len(h.counts))
        col = np.minimum((centers * columns).astype(np.int64), columns - 1)
        frac = np.bincount(col, weights=h.counts.astype(np.float64), minlength=columns) / float(h.counts.sum())
        with np.errstate(divide="ignore"):
            grid[row] = np.where(frac > 0, np.log10(np.maximum(frac, 1e-300)), np.nan)
        a = amax.get(name)
        if a is not None and h.amax > 0:
            marks.append((min(a / h.amax, 1.0) * columns, row))
    height = min(2.0 + 0.09 * len(names), 40.0)
    fig = new_figure(7.5, height)
    ax = fig.add_axes((0.1, 0.8 / height, 0.78, 1.0 - 1.6 / height))
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis", vmin=-7.0, vmax=0.0,
                      extent=(0, columns, len(names) - 0.5, -0.5))
    if marks:
        xs, ys = zip(*marks)
        ax.scatter(xs, ys, marker="|", color="red", s=40, linewidths=2.0)
    ax.set_xticks(np.linspace(0, columns, 5))
    ax.set_xticklabels(["0", "0.25", "0.5", "0.75", "1"])
    ax.set_xlabel("|x| / observed max (red: chosen amax)", fontsize=8)
    ax.set_ylabel("tensor (report order)", fontsize=8)
    ax.tick_params(labelsize=7)
    cax = fig.add_axes((0.9, 0.8 / height, 0.025, 1.0 - 1.6 / height))
    fig.colorbar(image, cax=cax).set_label("log10 fraction of values", fontsize=7)
    cax.tick_params(labelsize=6)
    if title:
        ax.set_title(title, fontsize=9)
    return save_png(fig, Path(target))
