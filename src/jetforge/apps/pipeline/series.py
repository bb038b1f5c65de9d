"""Bounded statistics of one series of durations: :class:`Samples` (exact count, sum and extremes; a uniform sample
for percentiles) and :class:`Tally` (count and sum, where only a mean is reported).

Why a module of its own: :mod:`.metrics` records about ten values a frame on the GPU path, at thousands of frames a
second, on threads that share one GIL with the thread that launches the batches; what a value costs is decided here.
"""

import dataclasses
import math
import random
from typing import Callable, Dict, Iterator, List, Sequence, TypeVar

from jetforge.runtime.measure import LatencyStats, latency_stats

#: Latency samples kept per series: every one up to this many frames, then a uniform random sample of
#: this size (reservoir sampling), so a camera app running for days keeps constant memory (reached
#: within a soak's warm-up).  Count, mean, min and max stay exact; the rank of a percentile from a
#: 2048-sample reservoir is within about 1 percentile point of the exact one (p99: 0.2 points s.d.).
MAX_SAMPLES = 2048

class Samples:
    """Durations of one series: exact count/sum/min/max, and at most ``capacity`` values for percentiles.

    Past ``capacity`` values the kept ones are a uniform random sample of all (reservoir sampling, Li's Algorithm
    L): the index of the next value to keep is drawn ahead, so an append that keeps nothing costs a comparison,
    not a random number.  Why it matters: the GPU path records about ten values a frame, at thousands of frames a
    second, on threads that share one GIL with the thread that launches the batches."""

    def __init__(self, capacity: int = MAX_SAMPLES, seed: int = 0) -> None:
        self.capacity = int(capacity)
        self.values: List[float] = []
        self.count = 0
        self.total = 0.0
        self.min = float("inf")
        self.max = float("-inf")
        self.last = 0.0
        self._rng = random.Random(seed)
        self._w = 1.0  # Algorithm L's running weight
        self._next = 0  # the count at which the next value is kept (once the reservoir is full)

    def append(self, value: float) -> None:
        value = float(value)
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        self.last = value
        if self.count <= self.capacity:
            self.values.append(value)
            if self.count == self.capacity:
                self._draw_next()
        elif self.count == self._next:  # this value replaces a kept one chosen uniformly
            self.values[self._rng.randrange(self.capacity)] = value
            self._draw_next()

    def extend(self, values: Sequence[float]) -> None:
        """``append`` of each value, in order, with the same result (the same values kept, for the same seed);
        the count, sum, extremes and the values not kept cost no Python step each."""
        if not len(values):
            return
        values = [float(v) for v in values]
        self.total += sum(values)
        low, high = min(values), max(values)
        if low < self.min:
            self.min = low
        if high > self.max:
            self.max = high
        self.last = values[-1]
        room = self.capacity - len(self.values)
        if room > 0:  # the reservoir's first values: kept as they come
            self.values.extend(values[:room])
            self.count += min(room, len(values))
            if self.count == self.capacity:
                self._draw_next()
            values = values[room:]
        start = self.count  # values[i] is value number start + i + 1
        end = start + len(values)
        while values and self._next <= end:
            self.count = self._next  # _draw_next counts from the value kept
            self.values[self._rng.randrange(self.capacity)] = values[self._next - start - 1]
            self._draw_next()
        self.count = max(self.count, end)

    def _draw_next(self) -> None:
        """Algorithm L (Li 1994): W *= U^(1/k); the next kept value is floor(ln U' / ln(1 - W)) + 1 values on."""
        rng, k = self._rng, self.capacity
        self._w *= math.exp(math.log(1.0 - rng.random()) / k)  # 1 - random() is in (0, 1]: no log(0)
        skip = math.log(1.0 - rng.random()) / math.log1p(-self._w) if self._w < 1.0 else 0.0
        self._next = self.count + int(math.floor(skip)) + 1

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[float]:
        return iter(self.values)

    def stats(self) -> LatencyStats:
        """latency_stats of the kept values, with count, total, mean, min and max over every value."""
        kept = latency_stats(self.values)
        if len(self.values) == self.count:  # every value kept: the exact statistics
            return kept
        return dataclasses.replace(kept, count=self.count, total=self.total, mean=self.total / self.count,
                                   min=self.min, max=self.max)


class Tally:
    """Count and sum of a series whose mean alone is reported (a stage's CPU per frame)."""

    __slots__ = ("count", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0

    def add(self, total: float, count: int = 1) -> None:
        self.count += count
        self.total += total


T = TypeVar("T")


def made(table: Dict[str, T], key: str, make: Callable[[], T]) -> T:
    """``table[key]``, made by ``make`` on first use.  Not ``setdefault(key, make())``: that builds a new one on
    every call, and the metrics call this for every frame and stage (a Samples with its seeded Random cost ~25 us
    a call, measured, under the GIL the GPU path's launch thread needs)."""
    value = table.get(key)
    if value is None:
        value = table[key] = make()
    return value


__all__ = ["MAX_SAMPLES", "Samples", "Tally", "made"]
