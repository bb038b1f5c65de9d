"""Plain-text tables for terminals and logs, shared by the CLI, the apps' run summaries and the benchmarks."""

from typing import Any, List


def format_table(headers: List[str], rows: List[List[Any]]) -> str:
    """Left-aligned columns under a dashed rule; ``None`` cells print empty."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
