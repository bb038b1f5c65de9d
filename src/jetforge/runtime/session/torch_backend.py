"""The PyTorch backend: development and GPU comparison only, never on the device path.

Opens an ``nn.Module`` (:meth:`TorchSession.from_module`), a TorchScript file
(``.pt``/``.ts``/``.pth`` saved with ``torch.jit.save``) or a ``torch.export`` program
(``.pt2``), on the CPU or a CUDA device, in FP32 or FP16, optionally channels-last.
Inputs and outputs are numpy arrays like every session (FP32 at the interface; the
model runs in the session's dtype).

On CUDA with ``cuda_graph=True`` (the default) each new input shape is warmed up on a
side stream, then captured with ``torch.cuda.CUDAGraph`` (thread-local capture mode, so
that other threads' CUDA calls - a video decoder's - go on) into static input/output
buffers; later calls of that shape copy in, replay and copy out.  Up to
``DEFAULT_MAX_GRAPHS`` shapes keep a live graph, the apps' batch sizes among them.  ``submit``/``wait``
queue the copies and the replay on the current CUDA stream and wait on a CUDA event.
:meth:`TorchSession.infer_tensors` takes and returns device tensors (no host copies),
for comparing with eager PyTorch and a bare graph replay (benchmarks/session_overhead/session_overhead.py).

torch is imported when a session is opened: this module is imported (to register the
backend) on machines without torch.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import BackendError, ConfigError, ModelError, UnknownNameError
from jetforge.optional import require
from jetforge.runtime.cuda.policy import CAPTURE, LAUNCH, GraphPolicy, shape_key
from jetforge.runtime.session.base import InferRequest, Session, load_sidecar_if_present
from jetforge.runtime.sidecar import TensorSpec

log = logging.getLogger(__name__)

DTYPES = ("fp32", "fp16")
# Live CUDA graphs a session keeps, one per input shape.  The apps pad batches to 6 sizes
# (jetforge.apps.pipeline.batching.DEFAULT_BUCKETS; a caller may give more); with fewer live graphs than sizes
# every size change re-captures a graph mid-stream, and after 4 x max_graphs captures the session runs eagerly.
DEFAULT_MAX_GRAPHS = 12
DEVICES = ("auto", "cpu", "cuda")
ShapeLike = Sequence[Union[int, str]]


def concrete_shape(shape: ShapeLike, fill: int = 1) -> Tuple[int, ...]:
    """A spec shape with its dynamic axes (-1 or a name such as "batch") replaced by ``fill``."""
    return tuple(d if isinstance(d, int) and d >= 0 else fill for d in shape)


def output_names_for(value: Any, given: Optional[Sequence[str]] = None) -> List[str]:
    """Names of a module's outputs: a tensor -> ["output"], a tuple -> output_0.., a dict -> its keys."""
    if isinstance(value, dict):
        names = [str(k) for k in value]
    elif isinstance(value, (tuple, list)):
        names = ["output_%d" % i for i in range(len(value))] if len(value) != 1 else ["output"]
    else:
        names = ["output"]
    if given is not None:
        if len(given) != len(names):
            raise ModelError("the model returns %d outputs but %d output names were given (%s)"
                             % (len(names), len(given), ", ".join(given)))
        names = list(given)
    return names


def flatten_outputs(value: Any) -> List[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, (tuple, list)):
        return list(value)
    return [value]


class _Captured:
    """One input shape's graph with its static buffers."""

    def __init__(self, graph: Any, static_in: List[Any], static_out: List[Any]) -> None:
        self.graph = graph
        self.static_in = static_in
        self.static_out = static_out


class TorchSession(Session):
    """A torch model on the CPU or a CUDA GPU (with CUDA graphs), behind the Session interface."""

    name = "pytorch"
    display_name = "PyTorch"
    suffixes = (".pt", ".pth", ".ts", ".pt2")
    option_names = ("device", "dtype", "channels_last", "cuda_graph", "input_shapes", "input_names", "output_names",
                    "warmup", "max_graphs", "verify_sidecar", "trust_code")

    def __init__(self, path: Path, module: Any, torch: Any, device: str, dtype: str, channels_last: bool,
                 inputs: List[TensorSpec], output_names: Optional[Sequence[str]], cuda_graph: bool, warmup: int,
                 max_graphs: int, sidecar: Any) -> None:
        self._torch = torch
        self._module = module
        self.device = device
        self.dtype = dtype
        self.channels_last = channels_last
        self.warmup = warmup
        self._tdtype = torch.float16 if dtype == "fp16" else torch.float32
        self._dev = torch.device(device)
        self._is_cuda = self._dev.type == "cuda"
        graphs_on = bool(cuda_graph) and self._is_cuda
        self.policy = GraphPolicy(enabled=graphs_on, max_graphs=max_graphs, max_captures=4 * max_graphs)
        self._graphs: Dict[Any, _Captured] = {}
        self._pinned: Dict[Any, Tuple[List[Any], List[Any]]] = {}
        self._pending: Optional[Dict[str, Any]] = None
        self._done_event: Any = None
        if self._is_cuda:
            self._events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        # One forward pass at a concrete shape names the outputs and checks the model runs.
        with torch.no_grad():
            probe = [self._prepare(torch.zeros(concrete_shape(s.shape), dtype=torch.float32)) for s in inputs]
            value = module(*probe)
        names = output_names_for(value, output_names)
        outputs = []
        for name, tensor in zip(names, flatten_outputs(value)):
            if not hasattr(tensor, "shape"):
                raise ModelError("model output %r is a %s, not a tensor" % (name, type(tensor).__name__))
            shape: List[Union[int, str]] = list(tensor.shape)
            if any(not isinstance(d, int) or d < 0 for d in inputs[0].shape[:1]) and shape:
                shape[0] = inputs[0].shape[0]  # a dynamic batch axis carries through
            outputs.append(TensorSpec(name=name, shape=shape, dtype="float32"))
        super().__init__(path, inputs, outputs, sidecar)

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def from_module(cls, module: Any, input_shapes: Optional[Dict[str, ShapeLike]] = None,
                    device: str = "auto", dtype: str = "fp32", channels_last: bool = False, cuda_graph: bool = True,
                    input_names: Optional[Sequence[str]] = None, output_names: Optional[Sequence[str]] = None,
                    warmup: int = 3, max_graphs: int = DEFAULT_MAX_GRAPHS, name: Optional[str] = None,
                    verify_sidecar: bool = True) -> "TorchSession":
        """A session over an in-memory ``nn.Module`` (moved to ``device``/``dtype``, put in eval mode).

        ``input_shapes`` maps input names to shapes (a name or -1 marks a dynamic axis), e.g.
        ``{"input": ["batch", 3, 224, 224]}``; default: one input "input" of [batch, 3, 224, 224].
        """
        torch = require("torch", "the PyTorch backend")
        dev = _resolve_device(torch, device)
        if dtype not in DTYPES:
            raise UnknownNameError("PyTorch session dtype", str(dtype), DTYPES)
        if dtype == "fp16" and dev == "cpu":
            raise ConfigError("fp16 on the CPU is not supported by the PyTorch backend (too slow and incomplete)",
                              hint="use dtype='fp32' on the CPU, or device='cuda'")
        specs = _input_specs(input_shapes, input_names)
        module = module.eval().to(device=dev, dtype=torch.float16 if dtype == "fp16" else torch.float32)
        if channels_last:
            module = module.to(memory_format=torch.channels_last)
        label = name or type(module).__name__
        return cls(Path(label), module, torch, dev, dtype, channels_last, specs, output_names, cuda_graph,
                   max(1, int(warmup)), max(1, int(max_graphs)), None)

    @classmethod
    def open(cls, path: Path, device: str = "auto", dtype: str = "fp32", channels_last: bool = False,
             cuda_graph: bool = True, input_shapes: Optional[Dict[str, ShapeLike]] = None,
             input_names: Optional[Sequence[str]] = None, output_names: Optional[Sequence[str]] = None,
             warmup: int = 3, max_graphs: int = DEFAULT_MAX_GRAPHS, verify_sidecar: bool = True,
             trust_code: bool = False) -> "TorchSession":
        """A TorchScript (``torch.jit.save``) or ``torch.export`` (``.pt2``) file; specs from its sidecar if any.

        Both formats are programs, not data: ``torch.export.load`` unpickles parts of the archive (and
        falls back to full unpickling for its example inputs), and PyTorch's security policy treats
        TorchScript archives as code.  Opening one therefore needs ``trust_code=True`` (the CLI's
        ``--trust-pickle``), which a user gives only for files they made themselves.
        """
        from jetforge.runtime.session.torch_files import (EXPORT_ARCHIVE, PICKLED_MODULE, STATE_DICT, not_a_program,
                                                         torch_file_kind)

        found, classes = torch_file_kind(Path(path))
        if found in (STATE_DICT, PICKLED_MODULE):  # not a program, trusted or not: say what it is and what to pass
            message, fix = not_a_program(Path(path), found, classes)
            raise ModelError(message, hint=fix)
        torch = require("torch", "the PyTorch backend")
        if not trust_code:
            kind = EXPORT_ARCHIVE if path.suffix.lower() == ".pt2" or found == EXPORT_ARCHIVE else "a TorchScript program"
            raise ModelError("%s is %s: opening it runs code stored in the file" % (path.name, kind),
                             hint="benchmark the exported .onnx instead, or, for a file you made yourself, "
                                  "pass --trust-pickle (trust_code=True)")
        log.warning("opening %s with trust_code: code stored in the file runs", path.name)
        sidecar = load_sidecar_if_present(path, verify=verify_sidecar)
        if input_shapes is None and sidecar is not None:
            input_shapes = {t.name: list(t.shape) for t in sidecar.inputs}
        if output_names is None and sidecar is not None and sidecar.outputs:
            output_names = [t.name for t in sidecar.outputs]
        try:
            if path.suffix.lower() == ".pt2":
                module = torch.export.load(str(path)).module()
            else:
                module = torch.jit.load(str(path), map_location="cpu")
        except Exception as err:
            hint = ("a .pth file of weights (a state dict) is not a model: build the model, load the weights and "
                    "use TorchSession.from_module" if path.suffix.lower() in (".pth", ".pt") else
                    "save the model with torch.jit.save or torch.export.save")
            raise ModelError("PyTorch cannot load %s as a TorchScript or exported model: %s"
                             % (path.name, str(err).strip().splitlines()[0] if str(err).strip() else
                                type(err).__name__), hint=hint) from err
        session = cls.from_module(module, input_shapes=input_shapes, device=device, dtype=dtype,
                                  channels_last=channels_last, cuda_graph=cuda_graph, input_names=input_names,
                                  output_names=output_names, warmup=warmup, max_graphs=max_graphs, name=path.name)
        session.path = Path(path)
        session.sidecar = sidecar
        return session

    # -- numpy interface --------------------------------------------------------------------
    def _run(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if not self._is_cuda:
            torch = self._torch
            with torch.no_grad():
                value = self._module(*[self._prepare(torch.from_numpy(np.ascontiguousarray(feeds[s.name])))
                                       for s in self.inputs])
            return {s.name: t.float().numpy() for s, t in zip(self.outputs, flatten_outputs(value))}
        return self._collect(self._enqueue(feeds))

    def _submit(self, feeds: Dict[str, np.ndarray]) -> InferRequest:
        if not self._is_cuda:
            return super()._submit(feeds)
        pending = self._enqueue(feeds)
        return InferRequest(self, lambda timeout: self._collect(pending), pending["done"].query)

    def _enqueue(self, feeds: Dict[str, np.ndarray]) -> Dict[str, Any]:
        """Queue H2D copies, the model (graph replay or eager) and D2H copies into pinned memory."""
        torch = self._torch
        if self._pending is not None:
            self._collect(self._pending)
        shapes = {s.name: tuple(feeds[s.name].shape) for s in self.inputs}
        key = shape_key(shapes)
        host_in, host_out = self._pinned_buffers(key, shapes)
        for s, buf in zip(self.inputs, host_in):
            buf.numpy()[...] = feeds[s.name]
        timed = self._timing
        stream = torch.cuda.current_stream(self._dev)
        ev = self._events
        if timed:
            ev[0].record(stream)
        dev_in = [buf.to(self._dev, non_blocking=True) for buf in host_in]
        if timed:
            ev[1].record(stream)
        outs = self._forward(dev_in, key)  # a graph's static inputs take any dtype/layout in one copy
        if timed:
            ev[2].record(stream)
        if not host_out:  # first call of this shape: size the pinned outputs
            host_out.extend(torch.empty(o.shape, dtype=torch.float32, pin_memory=True) for o in outs)
        for buf, o in zip(host_out, outs):
            buf.copy_(o, non_blocking=True)
        done = torch.cuda.Event(enable_timing=False) if not timed else ev[3]
        done.record(stream)
        self._pending = {"host_out": host_out, "done": done, "timed": timed, "outputs": None}
        return self._pending

    def _collect(self, pending: Dict[str, Any]) -> Dict[str, np.ndarray]:
        if pending["outputs"] is None:
            pending["done"].synchronize()
            pending["outputs"] = {s.name: buf.numpy().copy() for s, buf in zip(self.outputs, pending["host_out"])}
            if pending["timed"]:
                ev = self._events
                self._last_timing = {"h2d_ms": ev[0].elapsed_time(ev[1]), "compute_ms": ev[1].elapsed_time(ev[2]),
                                     "d2h_ms": ev[2].elapsed_time(ev[3])}
            if self._pending is pending:
                self._pending = None
        return pending["outputs"]

    def _pinned_buffers(self, key: Any, shapes: Dict[str, Tuple[int, ...]]) -> Tuple[List[Any], List[Any]]:
        if key not in self._pinned:
            torch = self._torch
            if len(self._pinned) >= 16:  # many shapes: keep the buffers bounded
                self._pinned.pop(next(iter(self._pinned)))
            self._pinned[key] = ([torch.empty(shapes[s.name], dtype=torch.float32, pin_memory=True)
                                  for s in self.inputs], [])
        return self._pinned[key]

    # -- device-tensor interface (GPU comparison) ----------------------------------------------
    @property
    def timing_source(self) -> str:  # type: ignore[override]
        return "cuda events" if self._is_cuda else "host clock"

    def infer_tensors(self, feeds: Dict[str, Any]) -> Dict[str, Any]:
        """Run on torch tensors already on the session's device; returns device tensors, asynchronously.

        With a captured graph the returned tensors are the graph's static outputs: the next
        call overwrites them (clone what you keep).  No host copies, no synchronisation.
        """
        self._check_open()
        xs = []
        for s in self.inputs:
            if s.name not in feeds:
                raise ModelError("input %r is missing" % s.name, hint="pass every input: %s"
                                 % ", ".join(t.name for t in self.inputs))
            x = feeds[s.name]
            if len(x.shape) != len(s.shape):
                raise ModelError("input %r expects %d dimensions, got shape %s" % (s.name, len(s.shape),
                                                                                  tuple(x.shape)))
            xs.append(x)
        key = shape_key({s.name: x.shape for s, x in zip(self.inputs, xs)})
        outs = self._forward(xs, key)
        return dict(zip((s.name for s in self.outputs), outs))

    def _prepare(self, x: Any) -> Any:
        """An input on the session's device, dtype and memory format."""
        x = x.to(device=self._dev, dtype=self._tdtype, non_blocking=True)
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=self._torch.channels_last)
        return x

    def _forward(self, xs: List[Any], key: Any) -> List[Any]:
        """The model's outputs for inputs ``xs``: replay the graph of ``key``, capture one, or run eagerly."""
        torch = self._torch
        action = self.policy.decide(key)
        if action == LAUNCH:
            captured = self._graphs[key]
            for static, x in zip(captured.static_in, xs):
                static.copy_(x)
            captured.graph.replay()
            return captured.static_out
        if action == CAPTURE:
            captured = self._capture(xs, key)
            if captured is not None:
                return captured.static_out
        with torch.no_grad():
            return flatten_outputs(self._module(*[self._prepare(x) for x in xs]))

    def _capture(self, xs: List[Any], key: Any) -> Optional[_Captured]:
        torch = self._torch
        static_in = [self._prepare(x).clone() for x in xs]  # clone keeps the channels-last layout
        try:
            side = torch.cuda.Stream(self._dev)
            side.wait_stream(torch.cuda.current_stream(self._dev))
            with torch.no_grad(), torch.cuda.stream(side):
                for _ in range(self.warmup):  # lazy init (cuDNN plans, workspaces) must not be captured
                    self._module(*static_in)
            torch.cuda.current_stream(self._dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread-local capture: torch's default ("global") makes every CUDA call of every other thread that
            # is unsafe during a capture fail - a GPU video path's decoder threads included, and NVDEC's error
            # aborts the process (PyNvVideoCodec: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, on an H100 2026-12-07).
            # The TensorRT session captures thread-local too (runtime/cuda/graph.py).
            with torch.no_grad(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
                static_out = flatten_outputs(self._module(*static_in))
        except Exception as err:  # capture refused (a sync or CPU op inside forward): plain execution from now on
            reason = "%s: %s" % (type(err).__name__, " ".join(str(err).split())[:200])
            log.warning("%s: CUDA graph capture failed (%s); running eagerly", self.path.name, reason)
            self._graphs.clear()
            self.policy.fall_back(reason)
            torch.cuda.synchronize(self._dev)
            return None
        # The captured forward did not run: replay once so that this call's outputs are real.
        graph.replay()
        captured = _Captured(graph, static_in, static_out)
        self._graphs[key] = captured
        for old in self.policy.captured(key):
            self._graphs.pop(old, None)
        return captured

    # -- lifecycle and description --------------------------------------------------------------
    def _close(self) -> None:
        if self._is_cuda:
            self._torch.cuda.synchronize(self._dev)
        self._graphs.clear()
        self._pinned.clear()
        self._pending = None
        self._module = None

    @property
    def version(self) -> str:
        return str(self._torch.__version__)

    def describe(self) -> str:
        where = self.device
        if self._is_cuda:
            where = "%s (%s)" % (self.device, self._torch.cuda.get_device_name(self._dev))
        text = "%s %s on %s, %s%s" % (self.display_name, self.version, where, self.dtype,
                                      ", channels_last" if self.channels_last else "")
        if self._is_cuda:
            text += ", CUDA graph %s" % self.policy.status
        return text

    def info(self) -> Dict[str, Any]:
        data = {"backend": self.name, "description": self.describe(), "version": self.version,
                "device": "gpu" if self._is_cuda else "cpu", "dtype": self.dtype, "channels_last": self.channels_last,
                "cuda_graph": self.policy.status if self._is_cuda else "off",
                "cuda_graph_captures": self.policy.captures}
        if self._is_cuda:
            data["torch_cuda_allocated_mib"] = self._torch.cuda.memory_allocated(self._dev) / float(1 << 20)
        return data


def _resolve_device(torch: Any, device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    base = str(device).split(":")[0]
    if base not in ("cpu", "cuda"):
        raise UnknownNameError("PyTorch session device", str(device), DEVICES)
    if base == "cuda" and not torch.cuda.is_available():
        raise BackendError("device %r was asked for but PyTorch sees no CUDA GPU" % device,
                           hint="use device='cpu', or a PyTorch build with CUDA on a machine with a GPU")
    return str(device)


def _input_specs(input_shapes: Optional[Dict[str, ShapeLike]], input_names: Optional[Sequence[str]]
                 ) -> List[TensorSpec]:
    if input_shapes is None:
        input_shapes = {"input": ["batch", 3, 224, 224]}
    if not isinstance(input_shapes, dict) or not input_shapes:
        raise ConfigError("input_shapes must map input names to shapes, e.g. {'input': ['batch', 3, 224, 224]}")
    specs = [TensorSpec(name=str(n), shape=list(s), dtype="float32") for n, s in input_shapes.items()]
    if input_names is not None:
        if len(input_names) != len(specs):
            raise ConfigError("%d input names for %d inputs" % (len(input_names), len(specs)))
        specs = [TensorSpec(name=str(n), shape=s.shape, dtype=s.dtype) for n, s in zip(input_names, specs)]
    return specs
