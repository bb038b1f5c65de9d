"""CUDA streams and events (cuda-python): a dedicated non-blocking stream, and event timing."""

from typing import Any, Optional

from jetforge.errors import ConfigError
from jetforge.runtime.cuda.bindings import check, error_code, runtime_api

NOT_READY = 600  # cudaErrorNotReady
STREAM_PRIORITIES = ("default", "high")  # what Stream(priority=...) takes


def check_priority(priority: str, what: str) -> str:
    """``priority`` if it is one of :data:`STREAM_PRIORITIES`, else a ConfigError naming ``what`` and the choices."""
    if priority not in STREAM_PRIORITIES:
        raise ConfigError("%s %r is not one of %s" % (what, priority, ", ".join(STREAM_PRIORITIES)))
    return priority


class Stream:
    """A CUDA stream of its own (``cudaStreamNonBlocking`` by default: no implicit sync with stream 0).

    ``handle`` is the ``cudaStream_t`` to pass to cuda-python; ``int(stream)`` is the raw
    handle TensorRT's ``execute_async_v3`` takes.

    ``priority``: ``"default"`` or ``"high"`` (the device's greatest stream priority,
    ``cudaStreamCreateWithPriority``): the block scheduler starts a high-priority stream's waiting blocks before
    other streams' as SMs free up -- for short work that others wait on (a decoder's frame copies) beside long
    kernels (a model's batch), so the short work does not queue behind whole kernels.
    """

    def __init__(self, non_blocking: bool = True, priority: str = "default") -> None:
        check_priority(priority, "stream priority")
        rt = runtime_api()
        flags = rt.cudaStreamNonBlocking if non_blocking else rt.cudaStreamDefault
        if priority == "high":
            _least, greatest = check(rt.cudaDeviceGetStreamPriorityRange(), "cudaDeviceGetStreamPriorityRange")
            self._handle: Optional[Any] = check(rt.cudaStreamCreateWithPriority(flags, int(greatest)),
                                                "cudaStreamCreateWithPriority")
        else:
            self._handle = check(rt.cudaStreamCreateWithFlags(flags), "cudaStreamCreateWithFlags")

    @property
    def priority(self) -> int:
        """The stream's numeric priority as CUDA reports it (lower numbers are greater priorities)."""
        return int(check(runtime_api().cudaStreamGetPriority(self.handle), "cudaStreamGetPriority"))

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise ValueError("stream used after it was destroyed")
        return self._handle

    def __int__(self) -> int:
        return int(self.handle)

    def __cuda_stream__(self) -> "tuple[int, int]":
        """The CUDA stream protocol (version 0, handle): CuPy, cuda.core and others can wrap this stream."""
        return (0, int(self.handle))

    def synchronize(self) -> None:
        check(runtime_api().cudaStreamSynchronize(self.handle), "cudaStreamSynchronize")

    def query(self) -> bool:
        """True when all work queued on the stream has finished."""
        result = runtime_api().cudaStreamQuery(self.handle)
        err = result[0] if isinstance(result, tuple) else result
        if error_code(err) == NOT_READY:
            return False
        check(result, "cudaStreamQuery")
        return True

    def wait_event(self, event: "Event") -> None:
        """Make later work on this stream wait for ``event`` (no host blocking)."""
        check(runtime_api().cudaStreamWaitEvent(self.handle, event.handle, 0), "cudaStreamWaitEvent")

    def is_capturing(self) -> bool:
        rt = runtime_api()
        status = check(rt.cudaStreamIsCapturing(self.handle), "cudaStreamIsCapturing")
        return int(status) != int(rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusNone)

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            check(runtime_api().cudaStreamDestroy(handle), "cudaStreamDestroy")

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Event:
    """A CUDA event: :meth:`record` on a stream, :meth:`synchronize`, and :meth:`elapsed_ms` between two."""

    def __init__(self, timing: bool = True, blocking_sync: bool = False) -> None:
        rt = runtime_api()
        flags = rt.cudaEventDefault if timing else rt.cudaEventDisableTiming
        if blocking_sync:
            flags = int(flags) | int(rt.cudaEventBlockingSync)
        self.timing = timing
        self._handle: Optional[Any] = check(rt.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags")

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise ValueError("event used after it was destroyed")
        return self._handle

    def record(self, stream: Any = None) -> "Event":
        handle = 0 if stream is None else getattr(stream, "handle", stream)
        check(runtime_api().cudaEventRecord(self.handle, handle), "cudaEventRecord")
        return self

    def synchronize(self) -> None:
        check(runtime_api().cudaEventSynchronize(self.handle), "cudaEventSynchronize")

    def query(self) -> bool:
        """True when the work before the recorded point has finished."""
        result = runtime_api().cudaEventQuery(self.handle)
        err = result[0] if isinstance(result, tuple) else result
        if error_code(err) == NOT_READY:
            return False
        check(result, "cudaEventQuery")
        return True

    def elapsed_ms(self, start: "Event") -> float:
        """Milliseconds of GPU time from ``start`` to this event (both recorded and completed)."""
        return float(check(runtime_api().cudaEventElapsedTime(start.handle, self.handle), "cudaEventElapsedTime"))

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            check(runtime_api().cudaEventDestroy(handle), "cudaEventDestroy")

    def __enter__(self) -> "Event":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
