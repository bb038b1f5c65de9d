"""One TensorRT execution context per CUDA graph, all of a session's contexts sharing one activation memory.

Why a context per graph: a CUDA graph captured from ``execute_async_v3`` bakes in the execution context it was
captured from -- the input shapes set on it, the tensor addresses and the context's activation ("device") memory
-- and TensorRT says to re-capture when input shapes change.  With one context, a video app whose batch size moves
between its six buckets (``apps/pipeline/batching.py``) re-captured at every change and gave graphs up after 16.
So :class:`ContextPool` gives each graph key (the input shapes, plus the caller's addresses on the device-input
path) a context of its own whose shapes and addresses are not touched while its graph lives.

Why one shared activation memory: each context normally allocates its own (``device_memory_size_v2`` bytes, the
most any profile needs), too much for 6+ contexts on an 8 GB Orin Nano.  A session queues all of its work on ONE
CUDA stream, one call after another, so no two of its contexts ever execute at once; TensorRT forbids sharing the
memory only between contexts that run in parallel.  The contexts therefore share one scratch allocation, sized for
the largest need (the engine's, which covers every profile and shape).  How a context is made without memory and
handed the shared one depends on the TensorRT version; :func:`choose_scratch_api` picks it from what the installed
module exposes -- not from the version text, so a build missing a binding still lands on a path that exists -- and
falls back to per-context memory, which ``info()["context_memory"]`` then says.  The calls, per version (written
against TensorRT's documented Python API, not executed here):

* 10.1+: ``engine.create_execution_context(trt.ExecutionContextAllocationStrategy.USER_MANAGED)``,
  ``engine.device_memory_size_v2``, ``context.set_device_memory(ptr, size)``;
* 10.0: the same creation, ``engine.device_memory_size``, ``context.device_memory = ptr``;
* 8.5/8.6: ``engine.create_execution_context_without_device_memory()``, ``engine.device_memory_size``,
  ``context.device_memory = ptr``.

Plain logic, tested on the CPU with fakes (tests/runtime/trt/test_context_pool.py).  Nothing here imports tensorrt.
"""

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple

#: Live graphs (= contexts) of a GPU session: the apps' 6 batch buckets, plus slack for a host/device-input mix.
DEFAULT_MAX_GRAPHS = 8
#: Captures allowed per live graph before the session runs without graphs for good (as the PyTorch session):
#: a bound on re-capture churn when more keys come than graphs are kept.
CAPTURES_PER_GRAPH = 4
#: One context's limits, as the session had before: DLA, or graphs off.
SINGLE_CONTEXT_CAPTURES = 16


@dataclass(frozen=True)
class ContextPlan:
    """How many contexts (= live graphs) a session keeps, how many captures it allows, whether they share memory."""

    max_contexts: int
    max_captures: int
    share_memory: bool
    why: str


def plan_contexts(graphs_enabled: bool, dla_core: Optional[int], max_graphs: int) -> ContextPlan:
    """The session's context plan.

    A DLA engine keeps one context with its own memory, as before (graphs are skipped on TensorRT 8.x DLA and
    tried once per shape on 10.x): its memory is the DLA loadable's, and nothing multi-context was tried on a DLA.
    Graphs off (asked, or DLA on TensorRT 8.x) need one context.  A GPU engine with graphs gets ``max_graphs``.
    """
    if dla_core is not None:
        return ContextPlan(1, SINGLE_CONTEXT_CAPTURES, False, "one context: a DLA engine keeps one, with its own memory")
    if not graphs_enabled:
        return ContextPlan(1, SINGLE_CONTEXT_CAPTURES, False, "one context: CUDA graphs are off")
    n = max(1, int(max_graphs))
    return ContextPlan(n, CAPTURES_PER_GRAPH * n, n > 1, "one context" if n == 1 else "")


@dataclass(frozen=True)
class ScratchApi:
    """How this TensorRT makes a context without its own activation memory and hands it the shared one.

    ``create``: ``"strategy"`` (10.0+) or ``"without_device_memory"`` (8.5/8.6); ``size``: the engine attribute
    with the bytes; ``setter``: ``"set_device_memory"`` (10.1+) or ``"device_memory"`` (a property, 8.x/10.0).
    Any of them empty: each context allocates its own, and ``missing`` says why.
    """

    create: str = ""
    size: str = ""
    setter: str = ""
    missing: str = ""

    @property
    def shared(self) -> bool:
        return bool(self.create and self.size and self.setter)

    def describe(self, nbytes: Optional[int]) -> str:
        """What ``info()["context_memory"]`` says."""
        if not self.shared:
            return "own (%s)" % self.missing
        how = ("USER_MANAGED contexts" if self.create == "strategy" else "contexts without device memory")
        give = "set_device_memory" if self.setter == "set_device_memory" else "device_memory ="
        return "shared: one %d-byte scratch for every context (%s, %s, %s)" % (int(nbytes or 0), how, self.size, give)


def own_memory(why: str) -> ScratchApi:
    return ScratchApi(missing=why)


def choose_scratch_api(trt: Any, engine: Any) -> ScratchApi:
    """The shared-memory calls the installed TensorRT offers (the newest of each), or per-context memory."""
    strategies = getattr(trt, "ExecutionContextAllocationStrategy", None)
    if getattr(strategies, "USER_MANAGED", None) is not None and callable(getattr(engine, "create_execution_context",
                                                                                  None)):
        create = "strategy"
    elif callable(getattr(engine, "create_execution_context_without_device_memory", None)):
        create = "without_device_memory"
    else:
        create = ""
    # the newest first: device_memory_size is deprecated from 10.1 (a DeprecationWarning when read)
    size = next((name for name in ("device_memory_size_v2", "device_memory_size") if hasattr(engine, name)), "")
    # on the class: TensorRT's device_memory is a write-only property, which hasattr() on an instance cannot see
    cls = getattr(trt, "IExecutionContext", None)
    setter = next((name for name in ("set_device_memory", "device_memory") if cls is not None and hasattr(cls, name)),
                  "")
    missing = [what for what, got in (("USER_MANAGED / create_execution_context_without_device_memory", create),
                                      ("device_memory_size", size),
                                      ("set_device_memory / device_memory", setter)) if not got]
    if missing:
        return own_memory("this TensorRT has no %s: each context allocates its own" % " nor ".join(missing))
    return ScratchApi(create, size, setter)


def create_context(trt: Any, engine: Any, api: ScratchApi) -> Any:
    """A new execution context: without memory of its own when ``api`` shares one, else the default one.

    None when TensorRT could not make it (out of memory), as TensorRT returns."""
    if not api.shared:
        return engine.create_execution_context()
    if api.create == "strategy":
        return engine.create_execution_context(trt.ExecutionContextAllocationStrategy.USER_MANAGED)
    return engine.create_execution_context_without_device_memory()


def scratch_bytes(engine: Any, api: ScratchApi) -> int:
    """The shared scratch's size: the engine's activation need, the most over every profile and shape."""
    return int(getattr(engine, api.size))


def give_scratch(context: Any, api: ScratchApi, ptr: int, nbytes: int) -> None:
    """Point ``context`` at the shared scratch (256-byte aligned device memory of at least ``nbytes``)."""
    if api.setter == "set_device_memory":
        context.set_device_memory(int(ptr), int(nbytes))
    else:
        context.device_memory = int(ptr)


class Slot:
    """One execution context and what is bound on it.

    ``binder``: the input shapes and tensor addresses set on the context (a ``DeviceInputBinder``);
    ``out_shapes``: the output shapes those inputs give; ``key``: the graph key it serves (None while free)."""

    def __init__(self, context: Any, binder: Any) -> None:
        self.context = context
        self.binder = binder
        self.out_shapes: Dict[str, Tuple[int, ...]] = {}
        self.key: Optional[Hashable] = None


class ContextPool:
    """The contexts of one session, one per graph key, the least recently used key giving its context up first.

    ``primary`` is the context made at open; it serves the first key and is the one kept by :meth:`collapse`.
    ``make`` returns a new :class:`Slot`, or None when TensorRT cannot make another context: the pool then stops
    growing at what it has (and re-uses the least recently used context) instead of failing the call.
    """

    def __init__(self, primary: Slot, make: Callable[[], Optional[Slot]], max_contexts: int) -> None:
        self.primary = primary
        self._make = make
        self.max_contexts = max(1, int(max_contexts))
        self._keyed: "OrderedDict[Hashable, Slot]" = OrderedDict()
        self._free: List[Slot] = [primary]
        self.created = 1
        self.refused = 0  # contexts TensorRT could not make

    @property
    def slots(self) -> List[Slot]:
        return list(self._keyed.values()) + list(self._free)

    def __len__(self) -> int:
        return len(self._keyed) + len(self._free)

    def keys(self) -> List[Hashable]:
        return list(self._keyed)

    def acquire(self, key: Hashable) -> Tuple[Slot, List[Hashable]]:
        """The slot serving ``key`` and the keys that gave their context up (their graphs must be destroyed).

        A known key keeps its context.  A new key takes a free context, else a new one while fewer than
        ``max_contexts`` exist, else the least recently used key's context (kept, not destroyed: making a context
        mid-stream takes time and, without shared memory, a new allocation; re-binding one keeps memory flat).
        """
        slot = self._keyed.get(key)
        if slot is not None:
            self._keyed.move_to_end(key)
            return slot, []
        evicted: List[Hashable] = []
        if self._free:
            slot = self._free.pop(0)
        elif len(self._keyed) < self.max_contexts:
            slot = self._make()
            if slot is None:
                self.refused += 1
                self.max_contexts = len(self._keyed)
            else:
                self.created += 1
        if slot is None:
            old, slot = self._keyed.popitem(last=False)
            evicted.append(old)
        slot.key = key
        self._keyed[key] = slot
        return slot, evicted

    def collapse(self) -> List[Slot]:
        """Keep only the primary context (graphs are given up: plain enqueue needs one); returns the others.

        The caller synchronizes the stream before dropping them: a context must outlive the work queued from it."""
        dropped = [s for s in self.slots if s is not self.primary]
        self._keyed.clear()
        self.primary.key = None
        self._free = [self.primary]
        self.max_contexts = 1
        return dropped

    def clear(self) -> List[Slot]:
        """Every slot, the pool emptied (closing the session)."""
        slots = self.slots
        self._keyed.clear()
        self._free = []
        return slots
