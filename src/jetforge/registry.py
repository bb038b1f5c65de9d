"""The one registry type for every extension point: commands, app tasks, calibration algorithms, pruning
criteria, session backends, input kinds, video sources and sinks, INT8 metrics.

A registry maps names to objects, in registration order.  An entry is either the object itself
(``@REGISTRY.register("name")`` on a class or function) or a *lazy* entry, ``"package.module:attr"``,
that is imported the first time the name is looked up: registering costs no import, so a listing
(``jetforge --help``, an option's ``choices``) never loads torch, ONNX or TensorRT.

Registering a name twice is a bug and raises; looking up an unknown name raises
:class:`~jetforge.errors.UnknownNameError` with close matches ("did you mean"), so a typo never
silently selects nothing.  Each entry may carry a one-line summary for help texts.

>>> ALGORITHMS = Registry("calibration algorithm")
>>> @ALGORITHMS.register("max", summary="largest absolute value seen")
... def amax_max(hist): ...
>>> ALGORITHMS.add_lazy("entropy", "jetforge.calibrate.algorithms:amax_entropy", summary="KL divergence")
>>> ALGORITHMS.names()
['max', 'entropy']
"""

import importlib
from typing import Callable, Dict, Generic, Iterator, List, Optional, Tuple, TypeVar

from jetforge.errors import UnknownNameError

T = TypeVar("T")


class _Lazy:
    """A ``"module:attr"`` reference, imported on first use."""

    def __init__(self, target: str) -> None:
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise ValueError("a lazy registry entry is 'package.module:attribute', got %r" % target)
        self.module, self.attr = module, attr

    def load(self) -> object:
        obj: object = importlib.import_module(self.module)
        for part in self.attr.split("."):
            obj = getattr(obj, part)
        return obj

    def __repr__(self) -> str:
        return "<lazy %s:%s>" % (self.module, self.attr)


class Registry(Generic[T]):
    """Names to objects (or lazy ``"module:attr"`` references), in registration order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # what a name is, for messages: "calibration algorithm", "command", ...
        self._items: Dict[str, object] = {}
        self._summaries: Dict[str, str] = {}

    def add(self, name: str, item: T, summary: str = "") -> T:
        self._claim(name, summary)
        self._items[name] = item
        return item

    def add_lazy(self, name: str, target: str, summary: str = "") -> None:
        """Register ``name`` as ``"package.module:attr"``; the module is imported by the first :meth:`get`."""
        lazy = _Lazy(target)
        self._claim(name, summary)
        self._items[name] = lazy

    def register(self, name: str, summary: str = "") -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name", summary="...")`` above a class or function."""
        def deco(item: T) -> T:
            return self.add(name, item, summary)
        return deco

    def remove(self, name: str) -> None:
        """Forget ``name`` (tests that register a dummy take it out again)."""
        if name not in self._items:
            raise UnknownNameError(self.kind, name, self._items)
        del self._items[name]
        self._summaries.pop(name, None)

    def get(self, name: str) -> T:
        try:
            item = self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._items) from None
        if isinstance(item, _Lazy):
            item = self._items[name] = item.load()
        return item  # type: ignore[return-value]

    def target(self, name: str) -> Optional[str]:
        """``"module:attr"`` of a lazy entry not imported yet, else None."""
        item = self._items.get(name)
        return "%s:%s" % (item.module, item.attr) if isinstance(item, _Lazy) else None

    def summary(self, name: str) -> str:
        if name not in self._items:
            raise UnknownNameError(self.kind, name, self._items)
        return self._summaries.get(name, "")

    def names(self) -> List[str]:
        return list(self._items)

    def summaries(self) -> List[Tuple[str, str]]:
        """(name, summary) in registration order, without importing lazy entries."""
        return [(n, self._summaries.get(n, "")) for n in self._items]

    def describe(self, indent: int = 2) -> str:
        """The entries as aligned ``name  summary`` lines, for a ``--help`` text."""
        rows = self.summaries()
        width = max((len(n) for n, _ in rows), default=0)
        return "\n".join((" " * indent + "%-*s  %s" % (width, n, s)).rstrip() for n, s in rows)

    def _claim(self, name: str, summary: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("a %s name must be a non-empty string, got %r" % (self.kind, name))
        if name in self._items:
            raise ValueError("%s %r is registered twice" % (self.kind, name))
        if summary:
            self._summaries[name] = summary

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return "<Registry %s: %s>" % (self.kind, ", ".join(self._items))
