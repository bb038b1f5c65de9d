"""The INT8 calibrator jetforge hands TensorRT: an ``IInt8EntropyCalibrator2`` that serves a finished cache.

jetforge calibrates on the workstation (``jetforge calibrate`` writes the cache with the same scales TensorRT's
entropy calibrator would use); on the board TensorRT only has to read them.  TensorRT calls
``read_calibration_cache`` first; a cache whose header matches its version is used as is, so ``get_batch``
(which would feed calibration batches) is never needed and returns None ("no more batches").  If TensorRT
asks for batches anyway, it did not accept the cache: ``batches_requested`` counts that and the builder says
so in the build report.

DLA takes INT8 only this way (no Q/DQ on DLA through TensorRT 10.x); TensorRT 11 and TensorRT-RTX have no
calibrator at all (:func:`.compat.has_calibrator`).
"""

from types import ModuleType
from typing import Any


def make_cache_calibrator(trt: ModuleType, cache: bytes, batch_size: int = 1) -> Any:
    """An ``IInt8EntropyCalibrator2`` of ``trt`` that serves ``cache`` and never asks for data."""
    class CacheCalibrator(trt.IInt8EntropyCalibrator2):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.cache = cache
            self.batches_requested = 0

        def get_batch_size(self) -> int:
            return batch_size

        def get_batch(self, names: Any, *args: Any) -> None:
            self.batches_requested += 1
            return None

        def read_calibration_cache(self) -> bytes:
            return self.cache

        def write_calibration_cache(self, data: Any) -> None:
            return None

    return CacheCalibrator()
