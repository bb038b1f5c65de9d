"""Recognize the board (or GPU) this code runs on, from the files a Jetson exposes.

On a Jetson:

- ``/proc/device-tree/model``: e.g. ``NVIDIA Jetson AGX Orin Developer Kit``;
- ``/proc/device-tree/compatible``: NUL-separated, e.g.
  ``nvidia,p3768-0000+p3767-0000\\0nvidia,p3767-0000\\0nvidia,tegra234\\0``; the module id
  (``p3767-0000``) decides Orin NX 16GB vs 8GB vs Orin Nano 8GB vs 4GB;
- ``/etc/nv_tegra_release``: ``# R35 (release), REVISION: 3.1, ...`` -> L4T 35.3.1 -> JetPack 5.1.1;
- ``/proc/meminfo``: only to tell apart modules that share an id or a model string (AGX Orin 32/64GB).

Elsewhere the GPU name (``nvidia-smi --query-gpu=name``, or pynvml if installed) is matched
against the desktop/server profiles.  Every reader takes a ``root`` so tests can point it at
a folder of recorded files.
"""

import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from jetforge.targets.loader import jetpack_table, list_targets
from jetforge.targets.schema import JetPackRelease, Target

log = logging.getLogger(__name__)

_TEGRA_RELEASE_RE = re.compile(r"#\s*R(\d+)\s*\(release\)\s*,\s*REVISION:\s*([0-9]+(?:\.[0-9]+)*)", re.IGNORECASE)
_MODULE_ID_RE = re.compile(r"\b(p\d{4}-\d{4})\b", re.IGNORECASE)
_SOC_RE = re.compile(r"\b(tegra\d{3})\b", re.IGNORECASE)

MODEL_FILES = ("proc/device-tree/model", "sys/firmware/devicetree/base/model")
COMPATIBLE_FILES = ("proc/device-tree/compatible", "sys/firmware/devicetree/base/compatible")
TEGRA_RELEASE_FILE = "etc/nv_tegra_release"
MEMINFO_FILE = "proc/meminfo"


@dataclass(frozen=True)
class Detection:
    """What :func:`detect` found, and how it decided."""

    target: Optional[Target]
    how: str
    model: Optional[str] = None
    compatible: Tuple[str, ...] = ()
    module_ids: Tuple[str, ...] = ()
    soc: Optional[str] = None
    l4t: Optional[str] = None
    jetpack: Optional[JetPackRelease] = None
    memory_gb: Optional[float] = None
    gpu_names: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> Dict[str, Any]:
        jp = self.jetpack
        return {
            "target": self.target.name if self.target else None,
            "display_name": self.target.display_name if self.target else None,
            "how": self.how,
            "model": self.model,
            "compatible": list(self.compatible),
            "module_ids": list(self.module_ids),
            "soc": self.soc,
            "l4t": self.l4t,
            "jetpack": jp.jetpack if jp else None,
            "tensorrt": jp.tensorrt if jp else None,
            "cuda": jp.cuda if jp else None,
            "memory_gb": self.memory_gb,
            "gpu_names": list(self.gpu_names),
            "warnings": list(self.warnings),
        }


# ---- parsers (pure functions over recorded text) ----------------------------------------------------

def parse_nv_tegra_release(text: str) -> Optional[str]:
    """``"# R35 (release), REVISION: 3.1, GCID: ..."`` -> ``"35.3.1"``; None if it is not such a line."""
    match = _TEGRA_RELEASE_RE.search(text or "")
    if not match:
        return None
    return "%s.%s" % (match.group(1), match.group(2))


def _l4t_candidates(l4t: str) -> List[str]:
    parts = l4t.split(".")
    out = [l4t]
    if len(parts) == 2:
        out.append(l4t + ".0")
    if len(parts) == 3 and parts[2] == "0":
        out.append(".".join(parts[:2]))
    return out


def release_for_l4t(l4t: str) -> Optional[JetPackRelease]:
    """The JetPack release that ships L4T ``l4t`` ("35.3.1"), or None if it is not in the table."""
    by_l4t = {r.l4t: r for r in jetpack_table()}
    for candidate in _l4t_candidates(l4t.strip()):
        if candidate in by_l4t:
            return by_l4t[candidate]
    return None


def jetpack_for_l4t(l4t: str) -> Optional[str]:
    """``"35.3.1"`` -> ``"5.1.1"``; None for an L4T version not in ``jetpack.yaml``."""
    release = release_for_l4t(l4t)
    return release.jetpack if release else None


def split_device_tree_strings(raw: str) -> List[str]:
    """A device-tree string property (NUL-separated, NUL-terminated) -> its strings."""
    return [s.strip() for s in raw.split("\x00") if s.strip()]


def module_ids_from_compatible(compatible: Sequence[str]) -> List[str]:
    """Module/carrier ids (``p3767-0000``) in the order they appear, without duplicates."""
    out: List[str] = []
    for entry in compatible:
        for mid in _MODULE_ID_RE.findall(entry):
            mid = mid.lower()
            if mid not in out:
                out.append(mid)
    return out


def soc_from_compatible(compatible: Sequence[str]) -> Optional[str]:
    for entry in compatible:
        match = _SOC_RE.search(entry)
        if match:
            return match.group(1).lower()
    return None


def parse_meminfo_gb(text: str) -> Optional[float]:
    """``MemTotal:  65011712 kB`` -> GiB as a float; None if absent."""
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", text or "", re.MULTILINE)
    if not match:
        return None
    return int(match.group(1)) / (1024.0 * 1024.0)


# ---- matching -----------------------------------------------------------------------------------------

def _closest_by_memory(candidates: List[Target], memory_gb: Optional[float]) -> Tuple[Target, Optional[str]]:
    """Pick among candidates by installed memory; without it, the first one (with a warning)."""
    if len(candidates) == 1:
        return candidates[0], None
    if memory_gb is None:
        chosen = candidates[0]
        return chosen, ("cannot tell %s apart without /proc/meminfo; assuming %s"
                        % (" / ".join(t.name for t in candidates), chosen.name))
    chosen = min(candidates, key=lambda t: abs((t.memory_gb or 0.0) - memory_gb))
    return chosen, None


def match_jetson(model: Optional[str], compatible: Sequence[str] = (), memory_gb: Optional[float] = None
                 ) -> Tuple[Optional[Target], str, List[str]]:
    """(target, how it was decided, warnings) from the device-tree model and compatible strings."""
    jetsons = list_targets(kind="jetson")
    warnings: List[str] = []
    for mid in module_ids_from_compatible(compatible):
        candidates = [t for t in jetsons if mid in t.module_ids]
        if candidates:
            target, warning = _closest_by_memory(candidates, memory_gb)
            if warning:
                warnings.append(warning)
            return target, "module id %s in device-tree compatible" % mid, warnings
    if model:
        text = " ".join(model.replace("\x00", " ").split()).lower()
        candidates = [t for t in jetsons if any(re.search(p, text, re.IGNORECASE) for p in t.model_patterns)]
        if candidates:
            target, warning = _closest_by_memory(candidates, memory_gb)
            if warning:
                warnings.append(warning)
            return target, "device-tree model %r" % model.strip("\x00 "), warnings
    soc = soc_from_compatible(compatible)
    if soc:
        candidates = [t for t in jetsons if t.soc == soc]
        if candidates:
            target, warning = _closest_by_memory(candidates, memory_gb)
            warnings.append("module not recognized; guessed %s from SoC %s%s" % (
                target.name, soc, " and memory size" if memory_gb else ""))
            if warning:
                warnings.append(warning)
            return target, "SoC %s in device-tree compatible" % soc, warnings
    return None, "no Jetson profile matches model %r / compatible %r" % (model, list(compatible)), warnings


def match_gpu_name(name: str) -> Optional[Target]:
    """The desktop/server (or Jetson Thor) profile whose GPU-name pattern matches ``name``."""
    for target in list_targets():
        for pattern in target.gpu_name_patterns:
            if re.search(pattern, name, re.IGNORECASE):
                return target
    return None


def query_gpu_names(timeout_s: float = 10.0) -> List[str]:
    """Names of the local NVIDIA GPUs (nvidia-smi, else pynvml); [] when neither works."""
    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            out = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, timeout=timeout_s, check=True)
            names = [line.strip() for line in out.stdout.decode("utf-8", "replace").splitlines() if line.strip()]
            if names:
                return names
        except (OSError, subprocess.SubprocessError) as err:
            log.debug("nvidia-smi failed: %s", err)
    try:
        import pynvml  # optional; absent -> no GPU name
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        try:
            names = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                raw = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                names.append(raw.decode() if isinstance(raw, bytes) else str(raw))
            return names
        finally:
            pynvml.nvmlShutdown()
    except Exception as err:  # NVML errors are many and version-dependent; none of them is fatal here
        log.debug("pynvml failed: %s", err)
        return []


# ---- the readers --------------------------------------------------------------------------------------

def _read_text(root: Path, candidates: Sequence[str]) -> Optional[str]:
    for rel in candidates:
        path = root / rel
        try:
            return path.read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
    return None


def detect(root: Union[str, "os.PathLike[str]"] = "/", gpu_names: Optional[Sequence[str]] = None) -> Detection:
    """Everything :func:`detect_target` looks at, with the decision and its reason.

    ``gpu_names`` replaces the live GPU query (for tests). The live query (nvidia-smi /
    pynvml) only runs when ``root`` is ``/``, so a folder of recorded files never mixes
    with this machine's GPU.
    """
    base = Path(root)
    model_raw = _read_text(base, MODEL_FILES)
    compatible_raw = _read_text(base, COMPATIBLE_FILES)
    release_raw = _read_text(base, (TEGRA_RELEASE_FILE,))
    meminfo = _read_text(base, (MEMINFO_FILE,))
    model = model_raw.replace("\x00", "").strip() if model_raw else None
    compatible = tuple(split_device_tree_strings(compatible_raw or ""))
    memory_gb = parse_meminfo_gb(meminfo or "")
    l4t = parse_nv_tegra_release(release_raw) if release_raw else None
    jetpack = release_for_l4t(l4t) if l4t else None
    warnings: List[str] = []
    if release_raw and not l4t:
        warnings.append("%s is not in the expected '# Rxx (release), REVISION: x.y' form" % TEGRA_RELEASE_FILE)
    if l4t and not jetpack:
        warnings.append("L4T %s is not in jetforge's JetPack table" % l4t)
    is_jetson = bool(release_raw) or any("tegra" in c.lower() for c in compatible) or (
        bool(model) and "jetson" in (model or "").lower())
    common = dict(model=model, compatible=compatible, module_ids=tuple(module_ids_from_compatible(compatible)),
                  soc=soc_from_compatible(compatible), l4t=l4t, jetpack=jetpack, memory_gb=memory_gb)
    if is_jetson or model:
        target, how, more = match_jetson(model, compatible, memory_gb)
        if is_jetson or target is not None:  # a device tree that matches no Jetson: another ARM board
            warnings.extend(more)
            for w in warnings:
                log.warning("target detection: %s", w)
            return Detection(target=target, how=how, warnings=tuple(warnings), **common)  # type: ignore[arg-type]
    if gpu_names is None:
        gpu_names = query_gpu_names() if os.path.abspath(str(base)) == os.path.abspath(os.sep) else []
    names = tuple(gpu_names)
    for name in names:
        target = match_gpu_name(name)
        if target is not None:
            return Detection(target=target, how="GPU name %r" % name, gpu_names=names, warnings=tuple(warnings),
                             **common)  # type: ignore[arg-type]
    how = ("no profile matches GPU %s" % ", ".join(repr(n) for n in names)) if names else "no Jetson files and no NVIDIA GPU found"
    return Detection(target=None, how=how, gpu_names=names, warnings=tuple(warnings), **common)  # type: ignore[arg-type]


def detect_target(root: Union[str, "os.PathLike[str]"] = "/", gpu_names: Optional[Sequence[str]] = None) -> Optional[Target]:
    """The profile of this machine (Jetson from its device tree, else by GPU name), or None."""
    return detect(root, gpu_names=gpu_names).target
