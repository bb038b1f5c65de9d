"""A small strict name -> object registry (targets, backends, CLI commands, assets).

Registering a name twice is a bug and raises; looking up an unknown name raises
UnknownNameError with close matches, so a typo never silently selects nothing.
"""

from typing import Callable, Dict, Generic, Iterator, List, TypeVar

from jetforge.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names to objects, in registration order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: Dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError("%s %r is registered twice" % (self.kind, name))
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        def deco(item: T) -> T:
            return self.add(name, item)
        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._items) from None

    def names(self) -> List[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
