"""Where a benchmark's files go, and ``import jetforge`` from this checkout: the first import of every script.

A benchmark runs as ``python benchmarks/<study>/<script>.py`` (from any folder, on a machine where jetforge may not
be installed: the lent GPU host has only its own ``python3``).  Its first lines put the checkout's root on
``sys.path``, so that ``benchmarks.common`` imports, and call :func:`use_checkout`::

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
    from benchmarks.common.paths import use_checkout  # noqa: E402

    use_checkout()

Results are named ``<device>_<date>[_<variant>].<ext>`` in the study's ``results/`` folder (:func:`result_path`):
``<device>`` is the GPU the result measures (``nvidia-h200``; ``nvidia-h200-x2`` for two) or, for a CPU result,
the CPU's family and core count (``epyc-2core``, ``xeon-16core``); ``<date>`` is the UTC day of the run.
``BENCH_DEVICE=NAME`` overrides the device part (e.g. on a Jetson, ``orin-nx-16gb``).

Standard library only: it runs before anything else can be imported.
"""

import datetime
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SRC = ROOT / "src"
#: A result's file name: ``<device>_<date>[_<variant>].<ext>`` (the test of the index checks every committed one).
RESULT_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*_\d{4}-\d{2}-\d{2}(_[A-Za-z0-9_.-]+)?\.(json|txt|png|log)$")


def use_checkout(subprocesses: bool = True) -> Dict[str, Any]:
    """Make ``import jetforge`` load this checkout's ``src/jetforge`` (put first on ``sys.path``; with
    ``subprocesses`` also on ``PYTHONPATH``, for the CLI and workers a benchmark starts).

    An editable install of this checkout is the same package; any other installed jetforge is shadowed, so a
    benchmark always measures the code beside it.  Returns how, for a result's JSON.
    """
    src = str(SRC)
    if src not in sys.path:
        sys.path.insert(0, src)
    if subprocesses:
        parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != src]
        os.environ["PYTHONPATH"] = os.pathsep.join([src] + parts)
    return {"jetforge": "this checkout's src/ first on the path", "src": src}


def study_dir(script: str) -> Path:
    """The study folder of a script (``benchmarks/<study>/``)."""
    return Path(script).resolve().parent


def results_dir(script: str) -> Path:
    """The study's ``results/`` folder."""
    return study_dir(script) / "results"


def today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def cpu_tag(cores: Optional[int] = None) -> str:
    """``<family>-<N>core`` of this CPU: ``epyc-2core`` (the shared 2-core VM), ``xeon-16core`` (the H200's host)."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1]
                    break
    except OSError:
        pass
    low = model.lower()
    family = next((name for name in ("epyc", "xeon", "ryzen", "threadripper", "core", "cortex", "neoverse",
                                     "carmel", "apple") if name in low), None) or _slug(platform.machine())
    return "%s-%dcore" % (family, cores or os.cpu_count() or 1)


def gpu_tag(gpus: int = 1) -> str:
    """``nvidia-h200`` (``-x2`` for two GPUs) from the CUDA device's name; needs torch and a GPU."""
    import torch

    return gpu_slug(torch.cuda.get_device_name(0)) + ("-x%d" % gpus if gpus > 1 else "")


def gpu_slug(name: str) -> str:
    """A GPU's name as a result-name device: the memory size and type dropped ("NVIDIA H100 80GB HBM3" ->
    ``nvidia-h100``, as "NVIDIA H200" -> ``nvidia-h200``), so results of one GPU model share one name."""
    kept = [w for w in name.split() if not re.fullmatch(r"(?i)\d+gb|hbm\d*e?|gddr\d*x?", w)]
    return _slug(" ".join(kept))


def device_tag(gpu: bool = False, gpus: int = 1) -> str:
    """The device part of a result name: ``$BENCH_DEVICE``, else the GPU (``gpu=True``), else the CPU."""
    given = os.environ.get("BENCH_DEVICE")
    if given:
        return _slug(given)
    return gpu_tag(gpus) if gpu else cpu_tag()


def result_name(variant: Optional[str] = None, device: Optional[str] = None, date: Optional[str] = None,
                suffix: str = ".json", gpu: bool = False) -> str:
    """``<device>_<date>[_<variant>]<suffix>``."""
    stem = "%s_%s" % (device or device_tag(gpu), date or today())
    if variant:
        stem += "_" + variant
    return stem + suffix


def result_path(script: str, variant: Optional[str] = None, suffix: str = ".json", gpu: bool = False,
                device: Optional[str] = None, date: Optional[str] = None) -> Path:
    """Where a script's result goes by default: ``<study>/results/<device>_<date>[_<variant>]<suffix>``."""
    return results_dir(script) / result_name(variant, device, date, suffix, gpu)


def committed(study: str, name: str) -> Path:
    """A committed result of a study, read as an input by another script (e.g. the H200 timing a fit starts from)."""
    return BENCHMARKS / study / "results" / name


def is_result_name(name: str) -> bool:
    return bool(RESULT_NAME.match(name))


def write_result(stem: Path, doc: Any, text: str) -> None:
    """The table printed, then ``<stem>.json`` (the result) and ``<stem>.txt`` (the table), each written atomically,
    and a line naming them: what a benchmark script leaves for the README and the index."""
    from jetforge.fileio import write_json_atomic, write_text_atomic

    print(text, flush=True)
    stem.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(Path(str(stem) + ".json"), doc)
    write_text_atomic(Path(str(stem) + ".txt"), text + "\n")
    print("wrote %s.{json,txt}" % stem)


def strip_suffixes(path: Path, suffixes: Sequence[str] = (".json", ".txt", ".png")) -> Path:
    """``x.json`` -> ``x`` (a stem that scripts writing ``.json``/``.txt``/``.png`` together take as ``--out``)."""
    return path.with_suffix("") if path.suffix in suffixes else path
