"""A stand-in for cuda-python's runtime bindings (``cuda.bindings.runtime``), for tests only: host memory, no GPU.

It is not CUDA.  It implements the calls :mod:`jetforge.runtime.cuda` makes for a TensorRT session -- ``cudaMalloc``
/ ``cudaMallocHost`` / ``cudaFree*``, ``cudaMemcpyAsync``, ``cudaMemsetAsync``, streams, events, stream capture
and graph launch -- over ordinary host memory, so that :class:`jetforge.runtime.tensorrt.session.TrtSession` runs
its real code (buffers, copies, graph capture and replay) against :mod:`tests.standins.tensorrt_standin`.

Where CUDA would refuse, the stand-in refuses too (with CUDA's error codes): a copy from or to an address that is
no allocation of the right kind ("device" vs "pinned host") or runs past its end, a freed pointer, a synchronize
while the stream is being captured.  Work queued on a stream runs at once (the stand-in has no asynchrony), except
while the stream is captured: then it is recorded into the graph and runs only when the graph is launched, exactly
when CUDA would run it -- so a graph that baked in a stale address shows.

A stream made *late* (:meth:`StandInCudaDevice.make_late`, for tests that look for a missing ordering between
streams) keeps its work until something needs it done: a synchronize of it, a synchronize or query of an event
recorded on it, or another stream waiting on such an event (``cudaStreamWaitEvent``: a late stream queues the wait,
any other drains the late one up to the event first).  Every other stream still runs its work at once.  That is an
order a GPU may take when the late stream is busy, so a producer that overwrites memory a late consumer has not
read yet, without waiting for it, gives the consumer the new data here.

What it cannot show: GPU timing.  ``cudaEventElapsedTime`` answers ``cudaErrorNotSupported`` naming the stand-in:
no time measured here is passed off as GPU time.
"""

import ctypes
import enum
import itertools
from typing import Any, Callable, Dict, List, Optional, Tuple

STAND_IN = "stand-in CUDA runtime (host memory, no GPU)"
ALIGNMENT = 256  # cudaMalloc's alignment; TensorRT requires it of tensor addresses
LEAST_PRIORITY, GREATEST_PRIORITY = 0, -5  # cudaDeviceGetStreamPriorityRange on recent GPUs (lower is greater)


class cudaError_t(enum.IntEnum):  # noqa: N801 - cuda-python's name
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInvalidResourceHandle = 400
    cudaErrorIllegalAddress = 700
    cudaErrorNotSupported = 801
    cudaErrorStreamCaptureUnsupported = 900
    cudaErrorStreamCaptureInvalidated = 901


class cudaMemcpyKind(enum.IntEnum):  # noqa: N801
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3


class cudaStreamCaptureMode(enum.IntEnum):  # noqa: N801
    cudaStreamCaptureModeGlobal = 0
    cudaStreamCaptureModeThreadLocal = 1
    cudaStreamCaptureModeRelaxed = 2


class cudaStreamCaptureStatus(enum.IntEnum):  # noqa: N801
    cudaStreamCaptureStatusNone = 0
    cudaStreamCaptureStatusActive = 1


cudaStreamDefault = 0
cudaStreamNonBlocking = 1
cudaEventDefault = 0
cudaEventBlockingSync = 1
cudaEventDisableTiming = 2

_OK = cudaError_t.cudaSuccess
# which allocation kind each end of a copy must be: (destination, source)
_ENDS = {cudaMemcpyKind.cudaMemcpyHostToDevice: ("device", "host"),
         cudaMemcpyKind.cudaMemcpyDeviceToHost: ("host", "device"),
         cudaMemcpyKind.cudaMemcpyDeviceToDevice: ("device", "device"),
         cudaMemcpyKind.cudaMemcpyHostToHost: ("host", "host")}


class StandInCudaError(Exception):
    """A call the stand-in refuses: carries the cudaError_t that CUDA would have returned."""

    def __init__(self, code: cudaError_t, message: str) -> None:
        super().__init__("%s: %s" % (code.name, message))
        self.code = code


class _NoTiming(int):
    """cudaErrorNotSupported whose name says it is the stand-in that measures no GPU time."""

    name = "cudaErrorNotSupported (the %s measures no GPU time)" % STAND_IN


class _Handle(int):
    """A stream, event or graph handle: an int, like cuda-python's (``int(handle)`` is the raw value)."""


class StandInCudaDevice:
    """The stand-in's one "device": its allocations, streams, events and graphs, all in host memory.

    Every entry point below is a module-level function of cuda-python's name bound to one instance
    (:func:`make_module`), so that the TensorRT stand-in can read and write the same memory and queue work
    on the same streams (:meth:`enqueue`, :meth:`view`).
    """

    def __init__(self) -> None:
        self.allocations: Dict[int, Tuple[int, str, Any]] = {}  # base -> (nbytes, "device"|"host", ctypes buffer)
        self.freed: List[int] = []
        self.streams: Dict[int, Optional[List[Callable[[], None]]]] = {}  # handle -> recorded work while capturing
        self.priorities: Dict[int, int] = {}  # handle -> priority (0 unless created with one)
        self.events: Dict[int, int] = {}
        self.graphs: Dict[int, List[Callable[[], None]]] = {}
        self.execs: Dict[int, List[Callable[[], None]]] = {}
        self.launches = 0
        self.captures = 0
        self._ids = itertools.count(1)
        self._last_error = _OK
        self.late: Dict[int, List[Tuple[str, Any]]] = {}  # late stream -> its queued ("work", fn) / ("wait", mark)
        self.queued: Dict[int, int] = {}  # late stream -> items ever queued on it
        self.ran: Dict[int, int] = {}  # late stream -> items run
        self.marks: Dict[int, Tuple[int, int]] = {}  # event -> (stream, items queued before its last record)

    # -- memory ------------------------------------------------------------------------------------------
    def allocate(self, nbytes: int, kind: str) -> int:
        if nbytes <= 0:
            raise StandInCudaError(cudaError_t.cudaErrorInvalidValue, "allocation of %d bytes" % nbytes)
        raw = (ctypes.c_uint8 * (int(nbytes) + ALIGNMENT))()
        base = ctypes.addressof(raw)
        ptr = (base + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        self.allocations[ptr] = (int(nbytes), kind, raw)
        return ptr

    def free(self, ptr: int, kind: str) -> None:
        entry = self.allocations.get(int(ptr))
        if entry is None or entry[1] != kind:
            raise StandInCudaError(cudaError_t.cudaErrorInvalidValue, "free of 0x%x, not a %s allocation"
                                   % (ptr, kind))
        del self.allocations[int(ptr)]
        self.freed.append(int(ptr))

    def region(self, ptr: int, nbytes: int, kind: str) -> int:
        """``ptr`` if ``nbytes`` from it lie inside one live allocation of ``kind``; else CUDA's error."""
        for base, (size, what, _raw) in self.allocations.items():
            if base <= ptr < base + size:
                if what != kind:
                    raise StandInCudaError(cudaError_t.cudaErrorInvalidValue, "0x%x is %s memory, the copy needs "
                                                                              "%s memory" % (ptr, what, kind))
                if ptr + nbytes > base + size:
                    raise StandInCudaError(cudaError_t.cudaErrorIllegalAddress, "%d bytes at 0x%x run past the end "
                                                                                "of a %d-byte allocation"
                                           % (nbytes, ptr, size))
                return ptr
        raise StandInCudaError(cudaError_t.cudaErrorIllegalAddress, "0x%x is no live allocation%s"
                               % (ptr, " (it was freed)" if ptr in self.freed else ""))

    def view(self, ptr: int, nbytes: int) -> Any:
        """A writable ctypes view of ``nbytes`` of device memory at ``ptr`` (for the TensorRT stand-in)."""
        return (ctypes.c_uint8 * max(1, nbytes)).from_address(self.region(int(ptr), nbytes, "device"))

    # -- streams and graphs -------------------------------------------------------------------------------
    def stream(self, handle: Any) -> int:
        key = int(handle)
        if key != 0 and key not in self.streams:
            raise StandInCudaError(cudaError_t.cudaErrorInvalidResourceHandle, "stream 0x%x does not exist" % key)
        return key

    def capturing(self, handle: Any) -> bool:
        return self.streams.get(self.stream(handle)) is not None

    def enqueue(self, handle: Any, work: Callable[[], None]) -> None:
        """Run ``work`` now, record it when the stream is being captured (CUDA runs it at graph launch), or queue it
        on a late stream."""
        key = self.stream(handle)
        recorded = self.streams.get(key)
        if recorded is not None:
            recorded.append(work)
        elif key in self.late:
            self._queue(key, ("work", work))
        else:
            work()

    # -- late streams (see the module docstring) ----------------------------------------------------------
    def make_late(self, handle: Any) -> None:
        """From now on ``handle``'s work waits until something needs it done."""
        key = self.stream(handle)
        if key == 0:
            raise ValueError("the default stream cannot be made late")
        self.late.setdefault(key, [])

    def _queue(self, key: int, item: Tuple[str, Any]) -> None:
        self.late[key].append(item)
        self.queued[key] = self.queued.get(key, 0) + 1

    def record(self, event: Any, handle: Any) -> None:
        key = self.stream(handle)
        if self.streams.get(key) is None:  # (an event recorded inside a capture is not tracked)
            self.marks[int(event)] = (key, self.queued.get(key, 0))

    def wait(self, handle: Any, event: Any) -> None:
        """``handle`` waits for ``event``'s last record: queued on a late stream, done at once on another."""
        key, mark = self.stream(handle), self.marks.get(int(event))
        if mark is None or self.streams.get(key) is not None:
            return
        if key in self.late:
            self._queue(key, ("wait", mark))
        else:
            self.drain(*mark)

    def drain(self, key: int, upto: Optional[int] = None) -> None:
        """Run a late stream's queued work, all of it or up to item ``upto`` (a wait drains the other stream)."""
        queue = self.late.get(key)
        while queue and (upto is None or self.ran.get(key, 0) < upto):
            kind, value = queue.pop(0)
            self.ran[key] = self.ran.get(key, 0) + 1
            if kind == "wait":
                self.drain(*value)
            else:
                value()

    def complete(self, event: Any) -> None:
        """Everything queued before ``event``'s last record has run."""
        mark = self.marks.get(int(event))
        if mark is not None:
            self.drain(*mark)

    def execute(self, stream: Any, inputs: List[Tuple[str, int, Tuple[int, ...], str]],
                outputs: List[Tuple[str, int, Tuple[int, ...], str]],
                compute: Callable[[Dict[str, Any]], Dict[str, Any]]) -> None:
        """An engine's work on ``stream``: read ``inputs`` (name, address, shape, dtype) from device memory, compute,
        write ``outputs`` there (the TensorRT stand-in's execute_async_v3); the addresses are checked when it runs."""
        import numpy as np

        def work() -> None:
            feeds = {}
            for name, ptr, shape, dtype in inputs:
                dt = np.dtype(dtype)
                nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
                feeds[name] = np.frombuffer(self.view(ptr, nbytes), np.uint8, nbytes).view(dt).reshape(shape).copy()
            results = compute(feeds)
            for name, ptr, shape, dtype in outputs:
                value = results[name]
                if tuple(value.shape) != tuple(shape):
                    raise StandInCudaError(cudaError_t.cudaErrorIllegalAddress, "output %r came out %s, not %s"
                                           % (name, value.shape, shape))
                target = np.frombuffer(self.view(ptr, value.nbytes), np.uint8, value.nbytes)
                target[:] = value.reshape(-1).view(np.uint8)
        self.enqueue(stream, work)

    def new_handle(self) -> _Handle:
        return _Handle(next(self._ids) * 16)


def make_module(device: Optional[StandInCudaDevice] = None) -> Any:
    """A module-like object with cuda-python's runtime names over ``device`` (a new one by default)."""
    import types

    dev = device or StandInCudaDevice()
    mod = types.ModuleType("cuda_runtime_standin_api", "stand-in for cuda.bindings.runtime: " + STAND_IN)
    for name in ("cudaError_t", "cudaMemcpyKind", "cudaStreamCaptureMode", "cudaStreamCaptureStatus",
                 "cudaStreamDefault", "cudaStreamNonBlocking", "cudaEventDefault", "cudaEventBlockingSync",
                 "cudaEventDisableTiming"):
        setattr(mod, name, globals()[name])
    mod.device = dev
    mod.STAND_IN = STAND_IN

    def call(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any) -> Any:
            try:
                values = fn(*args)
            except StandInCudaError as err:
                dev._last_error = err.code
                return (err.code, None)
            return (_OK,) if values is None else (_OK,) + (values if isinstance(values, tuple) else (values,))
        wrapped.__name__ = fn.__name__
        setattr(mod, fn.__name__, wrapped)
        return wrapped

    @call
    def cudaMalloc(nbytes: int) -> int:  # noqa: N802
        return dev.allocate(nbytes, "device")

    @call
    def cudaMallocHost(nbytes: int) -> int:  # noqa: N802
        return dev.allocate(nbytes, "host")

    @call
    def cudaFree(ptr: int) -> None:  # noqa: N802
        dev.free(ptr, "device")

    @call
    def cudaFreeHost(ptr: int) -> None:  # noqa: N802
        dev.free(ptr, "host")

    @call
    def cudaMemcpyAsync(dst: int, src: int, nbytes: int, kind: Any, stream: Any) -> None:  # noqa: N802
        dst_kind, src_kind = _ENDS[cudaMemcpyKind(int(kind))]
        n = int(nbytes)
        d, s = dev.region(int(dst), n, dst_kind), dev.region(int(src), n, src_kind)

        def copy() -> None:  # checked again when a graph replays it: the memory may be gone by then
            ctypes.memmove(dev.region(d, n, dst_kind), dev.region(s, n, src_kind), n)
        dev.enqueue(stream, copy)

    @call
    def cudaMemsetAsync(ptr: int, value: int, nbytes: int, stream: Any) -> None:  # noqa: N802
        p = dev.region(int(ptr), int(nbytes), "device")
        dev.enqueue(stream, lambda: ctypes.memset(dev.region(p, int(nbytes), "device"), int(value), int(nbytes)))

    @call
    def cudaStreamCreateWithFlags(flags: int) -> _Handle:  # noqa: N802
        handle = dev.new_handle()
        dev.streams[int(handle)] = None
        return handle

    @call
    def cudaDeviceGetStreamPriorityRange() -> Tuple[int, int]:  # noqa: N802
        return LEAST_PRIORITY, GREATEST_PRIORITY

    @call
    def cudaStreamCreateWithPriority(flags: int, priority: int) -> _Handle:  # noqa: N802
        handle = dev.new_handle()
        dev.streams[int(handle)] = None
        dev.priorities[int(handle)] = min(LEAST_PRIORITY, max(GREATEST_PRIORITY, int(priority)))  # CUDA clamps
        return handle

    @call
    def cudaStreamGetPriority(stream: Any) -> int:  # noqa: N802
        return dev.priorities.get(dev.stream(stream), 0)

    @call
    def cudaStreamDestroy(stream: Any) -> None:  # noqa: N802
        dev.drain(dev.stream(stream))  # CUDA finishes a destroyed stream's work
        dev.late.pop(dev.stream(stream), None)
        dev.priorities.pop(dev.stream(stream), None)
        dev.streams.pop(dev.stream(stream))

    @call
    def cudaStreamSynchronize(stream: Any) -> None:  # noqa: N802
        if dev.capturing(stream):  # CUDA: not permitted while the stream is being captured
            raise StandInCudaError(cudaError_t.cudaErrorStreamCaptureUnsupported, "synchronize while capturing")
        dev.drain(dev.stream(stream))

    @call
    def cudaDeviceSynchronize() -> None:  # noqa: N802
        if any(recorded is not None for recorded in dev.streams.values()):
            raise StandInCudaError(cudaError_t.cudaErrorStreamCaptureUnsupported, "device synchronize while capturing")
        for key in list(dev.late):  # every stream's work done (the others ran theirs when it was queued)
            dev.drain(key)

    @call
    def cudaStreamQuery(stream: Any) -> None:  # noqa: N802
        dev.drain(dev.stream(stream))  # (it could have finished: answering "done" is an order CUDA may take)

    @call
    def cudaStreamWaitEvent(stream: Any, event: Any, flags: int) -> None:  # noqa: N802
        dev.stream(stream)
        if int(event) not in dev.events:
            raise StandInCudaError(cudaError_t.cudaErrorInvalidResourceHandle, "event 0x%x" % int(event))
        dev.wait(stream, event)

    @call
    def cudaStreamIsCapturing(stream: Any) -> cudaStreamCaptureStatus:  # noqa: N802
        return (cudaStreamCaptureStatus.cudaStreamCaptureStatusActive if dev.capturing(stream)
                else cudaStreamCaptureStatus.cudaStreamCaptureStatusNone)

    @call
    def cudaStreamBeginCapture(stream: Any, mode: Any) -> None:  # noqa: N802
        key = dev.stream(stream)
        if key == 0 or dev.streams[key] is not None:
            raise StandInCudaError(cudaError_t.cudaErrorStreamCaptureUnsupported, "stream 0x%x cannot begin a capture"
                                   % key)
        dev.streams[key] = []

    @call
    def cudaStreamEndCapture(stream: Any) -> _Handle:  # noqa: N802
        key = dev.stream(stream)
        work = dev.streams.get(key)
        if work is None:
            raise StandInCudaError(cudaError_t.cudaErrorInvalidValue, "stream 0x%x is not capturing" % key)
        dev.streams[key] = None
        graph = dev.new_handle()
        dev.graphs[int(graph)] = work
        dev.captures += 1
        return graph

    @call
    def cudaGraphInstantiate(graph: Any, flags: int) -> _Handle:  # noqa: N802
        if int(graph) not in dev.graphs:
            raise StandInCudaError(cudaError_t.cudaErrorInvalidValue, "graph 0x%x" % int(graph))
        graph_exec = dev.new_handle()
        dev.execs[int(graph_exec)] = list(dev.graphs[int(graph)])
        return graph_exec

    @call
    def cudaGraphDestroy(graph: Any) -> None:  # noqa: N802
        dev.graphs.pop(int(graph), None)

    @call
    def cudaGraphExecDestroy(graph_exec: Any) -> None:  # noqa: N802
        if dev.execs.pop(int(graph_exec), None) is None:
            raise StandInCudaError(cudaError_t.cudaErrorInvalidValue, "graph exec 0x%x" % int(graph_exec))

    @call
    def cudaGraphLaunch(graph_exec: Any, stream: Any) -> None:  # noqa: N802
        work = dev.execs.get(int(graph_exec))
        if work is None:
            raise StandInCudaError(cudaError_t.cudaErrorInvalidValue, "graph exec 0x%x" % int(graph_exec))
        dev.launches += 1
        for step in work:
            dev.enqueue(stream, step)

    @call
    def cudaEventCreateWithFlags(flags: int) -> _Handle:  # noqa: N802
        handle = dev.new_handle()
        dev.events[int(handle)] = int(flags)
        return handle

    @call
    def cudaEventDestroy(event: Any) -> None:  # noqa: N802
        dev.events.pop(int(event))

    @call
    def cudaEventRecord(event: Any, stream: Any) -> None:  # noqa: N802
        dev.record(event, stream)

    @call
    def cudaEventSynchronize(event: Any) -> None:  # noqa: N802
        if int(event) not in dev.events:
            raise StandInCudaError(cudaError_t.cudaErrorInvalidResourceHandle, "event 0x%x" % int(event))
        dev.complete(event)

    @call
    def cudaEventQuery(event: Any) -> None:  # noqa: N802
        if int(event) not in dev.events:  # the work before it ran when it was queued (or runs now): complete
            raise StandInCudaError(cudaError_t.cudaErrorInvalidResourceHandle, "event 0x%x" % int(event))
        dev.complete(event)

    def cudaEventElapsedTime(start: Any, end: Any) -> Tuple[Any, None]:  # noqa: N802
        return (_NoTiming(cudaError_t.cudaErrorNotSupported), None)  # the error's name says why

    def cudaGetLastError() -> Tuple[cudaError_t]:  # noqa: N802
        err, dev._last_error = dev._last_error, _OK
        return (err,)

    def cudaGetErrorName(err: Any) -> Tuple[cudaError_t, bytes]:  # noqa: N802
        return (_OK, cudaError_t(int(err)).name.encode())

    mod.cudaEventElapsedTime = cudaEventElapsedTime
    mod.cudaGetLastError = cudaGetLastError
    mod.cudaGetErrorName = cudaGetErrorName
    return mod
