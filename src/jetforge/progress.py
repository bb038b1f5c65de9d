"""Progress bars with rate and ETA on stderr (tqdm), silent when disabled or not a terminal-worthy job."""

import sys
from typing import Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")


def progress_bar(items: Iterable[T], desc: str = "", unit: str = "it", total: Optional[int] = None,
                 enabled: bool = True) -> Iterator[T]:
    """Wrap ``items`` in a tqdm bar when enabled; tqdm is a core dependency but stays optional here."""
    if not enabled:
        return iter(items)
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a declared dependency
        return iter(items)
    return iter(tqdm(items, desc=desc, unit=unit, total=total, file=sys.stderr, dynamic_ncols=True, leave=False))
