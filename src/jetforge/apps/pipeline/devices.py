"""One model on several inference devices at once - the GPU and each DLA core of a Jetson: :class:`DevicePool`.

Why: a Jetson AGX Orin has a GPU and two DLA cores; NVIDIA's published Orin throughputs run the same network on
all three concurrently (one TensorRT engine per device, built for it).  A single session leaves the DLAs idle.

How: one worker thread per device, each owning its session; batches go into one shared queue and whichever
device is free takes the next one (a fast GPU takes more batches than a slower DLA, with no tuning).
:meth:`DevicePool.submit` returns a :class:`concurrent.futures.Future`; the multi-stream runner's finish thread
waits for the futures in submission order, so every stream's order is kept although devices finish out of order
(:class:`PooledBatchOps`, with ``in_flight`` >= the number of devices so that all are busy).

On a Jetson: :func:`open_device_sessions` opens the engine built for the GPU and the ones built for each DLA core
(``open_session(path, dla_core=k)``) - WRITTEN, NOT EXECUTED HERE (no Jetson, no DLA).  In CI, several ONNX
Runtime sessions stand in for the devices; on the H200, several CUDA sessions.
"""

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from jetforge.apps.pipeline.streams import BatchOps
from jetforge.errors import ConfigError

_STOP = object()


class DevicePool:
    """``run_fns[d](batch) -> outputs`` for each device ``d`` named ``names[d]``; see the module docstring."""

    def __init__(self, run_fns: Sequence[Callable[[Any], Any]], names: Optional[Sequence[str]] = None) -> None:
        if not run_fns:
            raise ConfigError("a device pool needs at least one device")
        self.names = list(names) if names else ["device%d" % d for d in range(len(run_fns))]
        if len(self.names) != len(run_fns):
            raise ConfigError("%d device names for %d devices" % (len(self.names), len(run_fns)))
        self._jobs: "queue.Queue[Any]" = queue.Queue()
        self.batches = [0] * len(run_fns)  # batches each device ran
        self._threads = [threading.Thread(target=self._work, args=(d, fn), name="infer-%s" % self.names[d],
                                          daemon=True) for d, fn in enumerate(run_fns)]
        for t in self._threads:
            t.start()

    def _work(self, d: int, fn: Callable[[Any], Any]) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            batch, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result((fn(batch), self.names[d]))
                self.batches[d] += 1
            except BaseException as err:  # handed to whoever waits for this batch
                future.set_exception(err)

    def submit(self, batch: Any) -> "Future[Any]":
        """Queue ``batch``; the future's result is ``(outputs, device name)``."""
        future: "Future[Any]" = Future()
        self._jobs.put((batch, future))
        return future

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(_STOP)
        for t in self._threads:
            t.join(timeout=30.0)

    def share(self) -> Dict[str, int]:
        """Batches run per device."""
        return dict(zip(self.names, self.batches))

    def __enter__(self) -> "DevicePool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PooledBatchOps(BatchOps):
    """:class:`~jetforge.apps.pipeline.streams.HostBatchOps`' flow with inference spread over a :class:`DevicePool`."""

    def __init__(self, preprocess: Callable[[Any], np.ndarray], pool: DevicePool,
                 postprocess: Callable[[Any, int, Any], Dict[str, Any]]) -> None:
        self._pre, self.pool, self._post = preprocess, pool, postprocess

    def launch(self, frames: List[Any], padded: int) -> Any:
        x = np.stack([self._pre(f) for f in frames])
        if padded > len(frames):
            x = np.concatenate([x, np.repeat(x[-1:], padded - len(frames), axis=0)])
        return self.pool.submit(x)

    def finish(self, handle: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        outputs, device = handle.result()
        events = [self._post(outputs, i, f) for i, f in enumerate(frames)]
        for e in events:
            e["device"] = device
        return events


def open_device_sessions(engines: Dict[str, Any], **options: Any) -> List[Any]:
    """Sessions for ``{"gpu": gpu.engine, "dla0": dla0.engine, "dla1": dla1.engine}`` (one engine per device,
    each built for it).  NOT EXECUTED HERE: TensorRT's DLA exists only on a Jetson (Xavier, Orin)."""
    from jetforge.runtime.session import open_session

    sessions = []
    for name, path in engines.items():
        if name.startswith("dla"):
            core = int(name[3:] or 0)
            sessions.append(open_session(path, backend="tensorrt", dla_core=core, **options))
        else:
            sessions.append(open_session(path, **options))
    return sessions


__all__ = ["DevicePool", "PooledBatchOps", "open_device_sessions"]
