"""The one NVML access (``pynvml``, from the nvidia-ml-py package): GPU memory, the energy counter, the driver.

Used by ``jetforge bench`` (memory and energy around a run), ``jetforge doctor`` (is NVML there, which
driver) and the pipeline's metrics (device memory in use).  NVML is a desktop/server GPU facility: a Jetson
before JetPack 6 has none (tegrastats is the source there), a CPU machine has no driver.  So nothing here
raises for an absent or failing NVML: :class:`NvmlDevice` records the reason and answers None.  ``pynvml``
is imported only when a device is opened.
"""

import os
from typing import Any, Dict, Optional, Tuple

from jetforge.errors import DependencyError
from jetforge.optional import require

MIB = float(1 << 20)


def load(name: str = "pynvml", purpose: str = "GPU memory and power through NVML") -> Any:
    """Import ``pynvml``; DependencyError with the install hint when absent."""
    return require(name, purpose)


def _words(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NvmlDevice:
    """One GPU through NVML, initialised on creation and shut down by :meth:`close` (or ``with``).

    ``reason`` says why NVML is not available ("" when it is); every query then returns None.
    """

    def __init__(self, index: int = 0, purpose: str = "GPU memory in benchmarks") -> None:
        self.reason = ""
        self._nvml: Any = None
        self._handle: Any = None
        try:
            nvml = load(purpose=purpose)
            nvml.nvmlInit()
            self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = nvml
        except DependencyError:
            self.reason = "pynvml is not installed (pip install nvidia-ml-py)"
        except Exception as err:  # no driver, no GPU, Jetson before JetPack 6: NVML says why
            self.reason = "NVML unavailable: %s" % _words(err)

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def memory(self) -> Optional[Dict[str, Any]]:
        """Device name, used and total MiB, and this process's share where NVML shows it."""
        if self._nvml is None:
            return None
        nvml, h = self._nvml, self._handle
        try:
            info = nvml.nvmlDeviceGetMemoryInfo(h)
            out: Dict[str, Any] = {"available": True, "device": _text(nvml.nvmlDeviceGetName(h)),
                                   "used_mib": info.used / MIB, "total_mib": info.total / MIB}
        except Exception as err:
            return {"available": False, "reason": "NVML memory query failed: %s" % err}
        try:  # per-process use is hidden in some containers
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                if int(proc.pid) == os.getpid() and proc.usedGpuMemory is not None:
                    out["process_used_mib"] = proc.usedGpuMemory / MIB
        except Exception:
            pass
        return out

    def used_mib(self) -> Optional[float]:
        """Device memory in use (MiB), None where NVML cannot tell."""
        if self._nvml is None:
            return None
        try:
            return self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used / MIB
        except Exception:
            return None

    def energy_mj(self) -> Optional[int]:
        """The board's total energy counter in millijoules (Volta and later), None where there is none."""
        if self._nvml is None:
            return None
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception:
            return None

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    def __enter__(self) -> "NvmlDevice":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def gpu_memory_mib(index: int = 0) -> Optional[float]:
    """Device memory in use on GPU ``index`` (MiB), or None where there is no NVML (CPU machines, Jetson)."""
    with NvmlDevice(index, purpose="GPU memory in pipeline metrics") as device:
        return device.used_mib()


def driver_version(nvml: Any) -> Tuple[Optional[str], str]:
    """(the NVIDIA driver version NVML reports, "") or (None, why NVML could not start) for a loaded ``pynvml``."""
    try:
        nvml.nvmlInit()
    except Exception as err:
        return None, _words(err)
    try:
        return _text(nvml.nvmlSystemGetDriverVersion()), ""
    finally:
        nvml.nvmlShutdown()
