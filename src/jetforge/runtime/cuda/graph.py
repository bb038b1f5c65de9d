"""CUDA graph capture and replay through cuda-python.

>>> with GraphCapture(stream) as capture:          # doctest: +SKIP
...     enqueue_work(stream)                         # recorded, not run
>>> graph = capture.graph                           # an instantiated CudaGraph
>>> graph.launch(stream)                             # replays the recorded work

``cudaStreamBeginCapture`` -> the work -> ``cudaStreamEndCapture`` ->
``cudaGraphInstantiate``; the graph template is destroyed once instantiated.
:func:`try_capture` is the form the sessions use: a capture that CUDA refuses (an
operation not permitted while capturing, e.g. TensorRT on DLA) returns the reason
instead of raising, and CUDA's sticky last error is cleared so that plain execution
can go on (the pattern of trtexec's ``--useCudaGraph``).
"""

import logging
from typing import Any, Callable, Optional, Tuple

from jetforge.errors import BackendError
from jetforge.runtime.cuda.bindings import check, clear_last_error, error_code, error_name, runtime_api

log = logging.getLogger(__name__)

CAPTURE_MODES = ("global", "thread_local", "relaxed")


class CudaGraph:
    """An instantiated CUDA graph (``cudaGraphExec_t``)."""

    def __init__(self, graph_exec: Any) -> None:
        self._exec: Optional[Any] = graph_exec
        self.launches = 0

    def launch(self, stream: Any) -> None:
        if self._exec is None:
            raise BackendError("CUDA graph launched after it was destroyed")
        check(runtime_api().cudaGraphLaunch(self._exec, getattr(stream, "handle", stream)), "cudaGraphLaunch")
        self.launches += 1

    @property
    def closed(self) -> bool:
        return self._exec is None

    def close(self) -> None:
        if self._exec is not None:
            graph_exec, self._exec = self._exec, None
            check(runtime_api().cudaGraphExecDestroy(graph_exec), "cudaGraphExecDestroy")

    def __enter__(self) -> "CudaGraph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _capture_mode(rt: Any, mode: str) -> Any:
    if mode not in CAPTURE_MODES:
        raise ValueError("capture mode must be one of %s, got %r" % (CAPTURE_MODES, mode))
    enum = rt.cudaStreamCaptureMode
    return {"global": enum.cudaStreamCaptureModeGlobal, "thread_local": enum.cudaStreamCaptureModeThreadLocal,
            "relaxed": enum.cudaStreamCaptureModeRelaxed}[mode]


def instantiate(graph: Any) -> CudaGraph:
    """``cudaGraphInstantiate`` (CUDA 12 signature, else ``cudaGraphInstantiateWithFlags``)."""
    rt = runtime_api()
    try:
        result = rt.cudaGraphInstantiate(graph, 0)
    except TypeError:  # cuda-python 11.x: cudaGraphInstantiate(graph, bufferSize) -> (err, exec, node, log)
        result = rt.cudaGraphInstantiateWithFlags(graph, 0)
    values = check(result, "cudaGraphInstantiate")
    graph_exec = values[0] if isinstance(values, tuple) else values
    return CudaGraph(graph_exec)


class GraphCapture:
    """Context manager recording the work queued on ``stream`` into a CUDA graph.

    On leaving the block the capture ends and the graph is instantiated into
    :attr:`graph`; a capture CUDA invalidated raises BackendError naming the reason
    (use :func:`try_capture` to get the reason instead).
    """

    def __init__(self, stream: Any, mode: str = "thread_local") -> None:
        self.stream = stream
        self.mode = mode
        self.graph: Optional[CudaGraph] = None

    def __enter__(self) -> "GraphCapture":
        rt = runtime_api()
        check(rt.cudaStreamBeginCapture(getattr(self.stream, "handle", self.stream), _capture_mode(rt, self.mode)),
              "cudaStreamBeginCapture")
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        rt = runtime_api()
        result = rt.cudaStreamEndCapture(getattr(self.stream, "handle", self.stream))
        err, template = result[0], result[1]
        failed = error_code(err) != 0
        if failed or exc_type is not None:
            if template is not None and int(template) != 0:
                rt.cudaGraphDestroy(template)
            clear_last_error()
            if exc_type is not None:
                return False  # the block's own exception propagates
            raise BackendError("CUDA graph capture failed: cudaStreamEndCapture returned %s (%d)"
                               % (error_name(err), error_code(err)),
                               hint="an operation in the captured work is not permitted while capturing; "
                                    "run it without a CUDA graph")
        try:
            self.graph = instantiate(template)
        finally:
            rt.cudaGraphDestroy(template)
        return False


def try_capture(stream: Any, work: Callable[[], Any], mode: str = "thread_local") -> Tuple[Optional[CudaGraph], str]:
    """Capture ``work()`` (which queues work on ``stream``) into a graph: ``(graph, "")`` or ``(None, reason)``.

    ``work`` returning ``False`` (TensorRT's ``execute_async_v3`` does on failure) counts as a
    failed capture.  Errors outside the capture itself (a destroyed stream) still raise.
    """
    rt = runtime_api()
    handle = getattr(stream, "handle", stream)
    begin = rt.cudaStreamBeginCapture(handle, _capture_mode(rt, mode))
    if error_code(begin[0] if isinstance(begin, tuple) else begin) != 0:
        clear_last_error()
        return None, "cudaStreamBeginCapture failed: %s" % error_name(begin[0] if isinstance(begin, tuple) else begin)
    reason = ""
    try:
        ok = work()
        if ok is False:
            reason = "the enqueue returned False while capturing"
    except Exception as err:  # the work's own failure ends the capture, then is reported as the reason
        reason = "%s while capturing: %s" % (type(err).__name__, " ".join(str(err).split())[:200])
    result = rt.cudaStreamEndCapture(handle)
    err, template = result[0], result[1]
    if error_code(err) != 0 and not reason:
        reason = "cudaStreamEndCapture returned %s" % error_name(err)
    if reason:
        if template is not None and int(template) != 0:
            rt.cudaGraphDestroy(template)
        clear_last_error()
        return None, reason
    try:
        return instantiate(template), ""
    except BackendError as exc:
        clear_last_error()
        return None, exc.message
    finally:
        rt.cudaGraphDestroy(template)
