"""``tegrastats`` on Jetson: parse its lines, run it alongside a benchmark, and turn power into energy.

NVML does not work on Jetson before JetPack 6 (and only partly after), so RAM, GPU load, EMC,
DLA clocks, temperatures and power rails come from ``tegrastats``.  The parser
handles every real sample line in ``tests/runtime/test_tegrastats.py``: an optional ``MM-DD-YYYY HH:MM:SS``
timestamp; ``RAM``/``SWAP``/``IRAM``; per-core ``CPU [..]`` with ``off``; ``EMC_FREQ``;
``GR3D_FREQ`` as ``X%``, ``X%@Y``, ``X%@[a,b]`` and ``@[a,b,c]``; engines such as
``NVDLA0 off`` / ``NVDLA0_FREQ @1600`` / ``VIC_FREQ 729`` / ``APE 174``; ``MTS fg X% bg Y%``;
temperatures ``name@T C`` with an optional ``/max`` and negative values; power rails
``NAME cur/avg`` or ``cur/avg/max`` with or without ``mW``; and arbitrary runs of whitespace.

Total power (for energy per inference) is read from the board's input rail: ``VDD_IN``
(Orin NX/Nano, Xavier NX, TX2), ``POM_5V_IN`` (Nano), ``VIN`` (Thor).  AGX Orin and AGX Xavier
report no input rail, so their total is the sum of all rails they print (AGX Orin:
VDD_GPU_SOC + VDD_CPU_CV + VIN_SYS_5V0 + VDDQ_VDD2_1V8AO; AGX Xavier: GPU + CPU + SOC + CV +
VDDRQ + SYS5V), as jtop does; :attr:`TegrastatsSample.total_power_source` says which was used.
Rails appear only when tegrastats runs as root.
"""

import logging
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from jetforge.errors import BackendError, DependencyError

log = logging.getLogger(__name__)

#: Input rails, in order of preference (the first present is the board's total power).
TOTAL_RAILS = ("VDD_IN", "POM_5V_IN", "VIN")

_TS = re.compile(r"^\s*(\d{2}-\d{2}-\d{4}\s+\d{2}:\d{2}:\d{2})\s+")
_RAM = re.compile(r"\bRAM\s+(\d+)/(\d+)MB(?:\s*\(lfb\s+(\d+)x(\d+)([KM]B)\))?")
_SWAP = re.compile(r"\bSWAP\s+(\d+)/(\d+)MB(?:\s*\(cached\s+(\d+)MB\))?")
_IRAM = re.compile(r"\bIRAM\s+(\d+)/(\d+)kB")
_CPU = re.compile(r"\bCPU\s+\[([^\]]*)\]")
_EMC = re.compile(r"\bEMC_FREQ\s+(\d+)%(?:@(\d+))?")
# the bracketed list: numbers separated by commas (tegrastats prints no other separator; "[0 0]" is no list)
_GR3D = re.compile(r"\bGR3D_FREQ\s+(?:(\d+)%)?(?:@(?:\[\s*(\d+(?:\s*,\s*\d+)*)\s*,?\s*\]|(\d+)))?")
_MTS = re.compile(r"\bMTS\s+fg\s+(\d+)%\s+bg\s+(\d+)%")
_TEMP = re.compile(r"(?<![\w@])([A-Za-z][\w]*)@(-?\d+(?:\.\d+)?)C(?:/(-?\d+(?:\.\d+)?)C)?")
_RAIL = re.compile(r"(?<![\w@])([A-Z][A-Z0-9_]*)\s+(\d+)(?:mW)?/(\d+)(?:mW)?(?:/(\d+)(?:mW)?)?(?![\w%@/])")
_ENGINE = re.compile(r"(?<![\w@])([A-Z][A-Z0-9]*(?:_FREQ)?)\s+(off|@\[?[\d,]+\]?|\d+(?:%@\d+)?)(?=\s|$)")
_SKIP_ENGINES = {"RAM", "SWAP", "IRAM", "CPU", "EMC_FREQ", "GR3D_FREQ", "MTS"}
# tegrastats prints no number of more than a few digits; a longer run is garbage (and int() of 4301+ digits raises)
_HUGE_NUMBER = re.compile(r"\d{16,}")


@dataclass
class Rail:
    """A power rail in mW: current, average and (JetPack 7) maximum."""

    current_mw: float
    average_mw: float
    max_mw: Optional[float] = None


@dataclass
class TegrastatsSample:
    """One tegrastats line."""

    raw: str
    timestamp: Optional[str] = None
    received: Optional[float] = None               # time.monotonic() when the line arrived (monitor only)
    ram_used_mb: Optional[int] = None
    ram_total_mb: Optional[int] = None
    lfb_blocks: Optional[int] = None
    lfb_block_size: Optional[str] = None
    swap_used_mb: Optional[int] = None
    swap_total_mb: Optional[int] = None
    swap_cached_mb: Optional[int] = None
    iram_used_kb: Optional[int] = None
    iram_total_kb: Optional[int] = None
    cpu: List[Optional[Tuple[int, Optional[int]]]] = field(default_factory=list)   # (load %, MHz) or None (off)
    emc_load: Optional[int] = None
    emc_freq_mhz: Optional[int] = None
    gpu_load: Optional[int] = None
    gpu_freq_mhz: List[int] = field(default_factory=list)                        # one per GPC
    mts: Optional[Tuple[int, int]] = None
    engines: Dict[str, Optional[str]] = field(default_factory=dict)               # NVDLA0 -> None (off) / "1600"
    temperatures: Dict[str, float] = field(default_factory=dict)
    temperature_max: Dict[str, float] = field(default_factory=dict)
    rails: Dict[str, Rail] = field(default_factory=dict)

    @property
    def dla_active(self) -> Dict[str, Optional[int]]:
        """DLA cores -> clock in MHz when active, None when off."""
        out: Dict[str, Optional[int]] = {}
        for name, value in self.engines.items():
            m = re.match(r"^NVDLA(\d+)(?:_FREQ)?$", name)
            if m:
                freq = re.findall(r"\d+", value or "")
                out["NVDLA%s" % m.group(1)] = int(freq[-1]) if value is not None and freq else None
        return out

    @property
    def total_power_source(self) -> Optional[str]:
        for name in TOTAL_RAILS:
            if name in self.rails:
                return name
        if self.rails:
            return "sum:" + "+".join(self.rails)
        return None

    @property
    def total_power_mw(self) -> Optional[float]:
        """Board input power in mW (see the module doc for the rail chosen per board)."""
        for name in TOTAL_RAILS:
            if name in self.rails:
                return self.rails[name].current_mw
        if self.rails:
            return float(sum(r.current_mw for r in self.rails.values()))
        return None

    def to_dict(self) -> Dict[str, Any]:
        return {"timestamp": self.timestamp, "ram_used_mb": self.ram_used_mb, "ram_total_mb": self.ram_total_mb,
                "swap_used_mb": self.swap_used_mb, "swap_total_mb": self.swap_total_mb,
                "cpu": [list(c) if c else None for c in self.cpu], "emc_load": self.emc_load,
                "emc_freq_mhz": self.emc_freq_mhz, "gpu_load": self.gpu_load, "gpu_freq_mhz": self.gpu_freq_mhz,
                "engines": dict(self.engines), "dla": self.dla_active, "temperatures": dict(self.temperatures),
                "rails": {k: {"current_mw": r.current_mw, "average_mw": r.average_mw, "max_mw": r.max_mw}
                          for k, r in self.rails.items()},
                "total_power_mw": self.total_power_mw, "total_power_source": self.total_power_source}


def parse_line(line: str) -> Optional[TegrastatsSample]:
    """Parse one tegrastats line; None for a blank line, one without a RAM field, or one with absurd numbers."""
    text = " ".join(line.split())
    if not text or _HUGE_NUMBER.search(text):
        return None
    sample = TegrastatsSample(raw=line.rstrip("\n"))
    m = _TS.match(text)
    if m:
        sample.timestamp = " ".join(m.group(1).split())
        text = text[m.end():]
    m = _RAM.search(text)
    if not m:
        return None
    sample.ram_used_mb, sample.ram_total_mb = int(m.group(1)), int(m.group(2))
    if m.group(3):
        sample.lfb_blocks, sample.lfb_block_size = int(m.group(3)), m.group(4) + m.group(5)
    m = _SWAP.search(text)
    if m:
        sample.swap_used_mb, sample.swap_total_mb = int(m.group(1)), int(m.group(2))
        sample.swap_cached_mb = int(m.group(3)) if m.group(3) else None
    m = _IRAM.search(text)
    if m:
        sample.iram_used_kb, sample.iram_total_kb = int(m.group(1)), int(m.group(2))
    m = _CPU.search(text)
    if m:
        for core in m.group(1).split(","):
            core = core.strip()
            cm = re.match(r"^(\d+)%(?:@(\d+))?$", core)
            if cm:
                sample.cpu.append((int(cm.group(1)), int(cm.group(2)) if cm.group(2) else None))
            elif core in ("off", "..."):
                if core == "off":
                    sample.cpu.append(None)
    m = _EMC.search(text)
    if m:
        sample.emc_load = int(m.group(1))
        sample.emc_freq_mhz = int(m.group(2)) if m.group(2) else None
    m = _GR3D.search(text)
    if m:
        sample.gpu_load = int(m.group(1)) if m.group(1) else None
        if m.group(2):
            sample.gpu_freq_mhz = [int(v) for v in m.group(2).split(",") if v.strip()]
        elif m.group(3):
            sample.gpu_freq_mhz = [int(m.group(3))]
    m = _MTS.search(text)
    if m:
        sample.mts = (int(m.group(1)), int(m.group(2)))
    rest = _CPU.sub(" ", text)
    for tm in _TEMP.finditer(rest):
        sample.temperatures[tm.group(1)] = float(tm.group(2))
        if tm.group(3):
            sample.temperature_max[tm.group(1)] = float(tm.group(3))
    for rm in _RAIL.finditer(rest):
        name = rm.group(1)
        if name in ("RAM", "SWAP", "IRAM"):
            continue
        sample.rails[name] = Rail(float(rm.group(2)), float(rm.group(3)),
                                  float(rm.group(4)) if rm.group(4) else None)
    for em in _ENGINE.finditer(rest):
        name, value = em.group(1), em.group(2)
        if name in _SKIP_ENGINES or name in sample.rails:
            continue
        sample.engines[name] = None if value == "off" else value.lstrip("@")
    return sample


def parse_lines(lines: Sequence[str]) -> List[TegrastatsSample]:
    return [s for s in (parse_line(l) for l in lines) if s is not None]


# ------------------------------------------------------------------------------------------------
# energy
# ------------------------------------------------------------------------------------------------
@dataclass
class EnergyReport:
    """Mean board power over a run and the energy each inference cost."""

    samples: int
    mean_power_w: float
    duration_s: float
    inferences: int
    energy_j: float
    mj_per_inference: float
    rail: str

    def to_dict(self) -> Dict[str, Any]:
        return {"samples": self.samples, "mean_power_w": round(self.mean_power_w, 4),
                "duration_s": round(self.duration_s, 4), "inferences": self.inferences,
                "energy_j": round(self.energy_j, 6), "mj_per_inference": round(self.mj_per_inference, 6),
                "rail": self.rail}


def energy_per_inference(samples: Sequence[TegrastatsSample], inferences: int,
                         duration_s: float) -> Optional[EnergyReport]:
    """Energy per inference = mean total power over the run x its duration / inferences.

    Returns None when no sample carries power rails (tegrastats not run as root, or a board
    without rails): energy is then unknown, never guessed.
    """
    powered = [s for s in samples if s.total_power_mw is not None]
    if not powered or inferences <= 0 or duration_s <= 0:
        return None
    mean_w = sum(float(s.total_power_mw or 0.0) for s in powered) / len(powered) / 1000.0
    energy = mean_w * duration_s
    return EnergyReport(len(powered), mean_w, float(duration_s), int(inferences), energy,
                        energy / inferences * 1000.0, powered[-1].total_power_source or "")


# ------------------------------------------------------------------------------------------------
# the monitor
# ------------------------------------------------------------------------------------------------
class TegrastatsMonitor:
    """Run ``tegrastats --interval N`` in a subprocess and collect its samples in a thread.

    >>> with TegrastatsMonitor(interval_ms=100) as mon:   # doctest: +SKIP
    ...     run_benchmark()
    >>> mon.energy_per_inference(n)

    Only the process this monitor started is stopped (terminate, then kill after a timeout).
    """

    def __init__(self, interval_ms: int = 100, executable: str = "tegrastats",
                 extra_args: Sequence[str] = ()) -> None:
        if interval_ms <= 0:
            raise ValueError("interval_ms must be positive")
        self.interval_ms = int(interval_ms)
        self.executable = executable
        self.extra_args = list(extra_args)
        self.samples: List[TegrastatsSample] = []
        self.unparsed: List[str] = []
        self._proc: Optional[subprocess.Popen] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.started_at: Optional[float] = None
        self.stopped_at: Optional[float] = None

    def start(self) -> "TegrastatsMonitor":
        if self._proc is not None:
            raise BackendError("tegrastats monitor is already running", hint="call stop() first")
        cmd = [self.executable, "--interval", str(self.interval_ms)] + self.extra_args
        try:
            # errors="replace": one byte that is not UTF-8 (a garbled line) must not end the reader thread, after
            # which samples would silently stop; such a line simply does not parse
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          universal_newlines=True, encoding="utf-8", errors="replace", bufsize=1)
        except FileNotFoundError as err:
            raise DependencyError("%s was not found: tegrastats exists only on Jetson (L4T)" % self.executable,
                                  hint="run on the Jetson, or measure without power rails") from err
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._read, name="tegrastats-reader", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            sample = parse_line(line)
            with self._lock:
                if sample is None:
                    if line.strip():
                        self.unparsed.append(line.rstrip("\n"))
                    continue
                sample.received = time.monotonic()
                self.samples.append(sample)

    def stop(self, timeout: float = 5.0) -> List[TegrastatsSample]:
        proc = self._proc
        if proc is None:
            return list(self.samples)
        self.stopped_at = time.monotonic()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        if proc.stdout is not None:
            proc.stdout.close()
        self._proc = None
        return self.snapshot()

    def snapshot(self) -> List[TegrastatsSample]:
        with self._lock:
            return list(self.samples)

    def between(self, start: float, end: float) -> List[TegrastatsSample]:
        """Samples received in ``[start, end]`` (``time.monotonic()`` values)."""
        return [s for s in self.snapshot() if s.received is not None and start <= s.received <= end]

    def energy_per_inference(self, inferences: int, start: Optional[float] = None,
                             end: Optional[float] = None) -> Optional[EnergyReport]:
        """Energy per inference over ``[start, end]`` (default: the whole monitoring window)."""
        t0 = start if start is not None else self.started_at
        t1 = end if end is not None else (self.stopped_at or time.monotonic())
        if t0 is None:
            return None
        return energy_per_inference(self.between(t0, t1), inferences, t1 - t0)

    def summary(self) -> Dict[str, Any]:
        """Peaks and means for a benchmark report."""
        samples = self.snapshot()

        def values(attr: str) -> List[float]:
            return [float(getattr(s, attr)) for s in samples if getattr(s, attr) is not None]

        out: Dict[str, Any] = {"samples": len(samples)}
        for attr in ("ram_used_mb", "gpu_load", "emc_load", "total_power_mw"):
            vals = values(attr)
            if vals:
                out[attr] = {"mean": sum(vals) / len(vals), "max": max(vals)}
        return out

    def __enter__(self) -> "TegrastatsMonitor":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
