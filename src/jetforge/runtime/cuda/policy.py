"""When to capture, replay or re-capture a CUDA graph: plain decisions, no CUDA import.

Used by the TensorRT and PyTorch sessions, tested on the CPU.  A graph is specific to
the input shapes it was captured with (and, for TensorRT, to the context's state), so
the key of a graph is the tuple of input shapes:

* a key with a live graph -> ``LAUNCH`` (replay it);
* a new key -> ``CAPTURE`` (run the work once for real -- the warm-up that flushes
  lazy initialisation and deferred shape updates -- then record it for later calls);
  when more than ``max_graphs`` would be live the oldest is evicted (the PyTorch session keeps
  one graph per shape this way; the TensorRT session keeps one execution context per graph and
  evicts through its context pool, telling the policy with :meth:`GraphPolicy.discard`);
* capture failed, or shapes changed more than ``max_captures`` times -> fall back to
  plain execution for good (``status`` = ``"fallback: <reason>"``);
* buffers re-allocated -> every graph is invalid (:meth:`GraphPolicy.invalidate`).
"""

from collections import OrderedDict
from typing import Hashable, List, Optional, Sequence, Tuple

ENQUEUE = "enqueue"   # run without a graph
CAPTURE = "capture"   # run once without a graph, then capture a graph for this key
LAUNCH = "launch"     # replay the live graph of this key


class GraphPolicy:
    """The state machine of one session's CUDA graphs (the session holds the graph objects by key)."""

    def __init__(self, enabled: bool = True, max_graphs: int = 1, max_captures: int = 16) -> None:
        if max_graphs < 1 or max_captures < 1:
            raise ValueError("max_graphs and max_captures must be at least 1")
        self.requested = bool(enabled)
        self.enabled = bool(enabled)
        self.max_graphs = max_graphs
        self.max_captures = max_captures
        self.captures = 0
        self.fallback_reason: Optional[str] = None
        self._live: "OrderedDict[Hashable, None]" = OrderedDict()

    @property
    def status(self) -> str:
        """``"off"``, ``"on"`` (capturing/replaying) or ``"fallback: <reason>"`` (for ``session.info()``)."""
        if not self.requested:
            return "off"
        if self.fallback_reason is not None:
            return "fallback: " + self.fallback_reason
        return "on"

    @property
    def live_keys(self) -> List[Hashable]:
        return list(self._live)

    def decide(self, key: Hashable) -> str:
        """What to do for inputs of ``key``: ENQUEUE, CAPTURE or LAUNCH."""
        if not self.enabled or self.fallback_reason is not None:
            return ENQUEUE
        if key in self._live:
            self._live.move_to_end(key)
            return LAUNCH
        if self.captures >= self.max_captures:
            self.fall_back("input shapes changed %d times; each change needs a new capture" % self.captures)
            return ENQUEUE
        return CAPTURE

    def captured(self, key: Hashable) -> List[Hashable]:
        """Record a successful capture of ``key``; returns the keys whose graphs must now be destroyed."""
        self.captures += 1
        self._live[key] = None
        self._live.move_to_end(key)
        evicted = []
        while len(self._live) > self.max_graphs:
            old, _ = self._live.popitem(last=False)
            evicted.append(old)
        return evicted

    def fall_back(self, reason: str) -> List[Hashable]:
        """Stop using graphs for good; returns every live key (their graphs must be destroyed)."""
        self.enabled = False
        self.fallback_reason = reason
        return self.invalidate()

    def discard(self, keys: Sequence[Hashable]) -> List[Hashable]:
        """Forget the graphs of ``keys`` only (what they baked in changed); returns those that were live."""
        gone = [k for k in keys if k in self._live]
        for k in gone:
            del self._live[k]
        return gone

    def invalidate(self) -> List[Hashable]:
        """Forget every live graph (their buffers moved); returns their keys."""
        keys = list(self._live)
        self._live.clear()
        return keys


def shape_key(shapes: "dict") -> Tuple[Tuple[str, Tuple[int, ...]], ...]:
    """A hashable key of named input shapes, independent of dict order."""
    return tuple(sorted((str(name), tuple(int(d) for d in shape)) for name, shape in shapes.items()))
