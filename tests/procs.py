"""The processes the live tests start, as Linux sees them."""

from __future__ import annotations

from pathlib import Path


def child_pids(parent: int) -> list[int]:
    """The pids of `parent`'s children (read from /proc)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        if int(fields[1]) == parent:
            children.append(int(stat.parent.name))
    return children
