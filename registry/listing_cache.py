"""What the directory derives from every listed entry (its filter choices and their counts),
kept in each process until the listing changes.

The counts are the same for every visitor and cost tens of milliseconds on 10,000 entries, so a
process keeps them for a while; but a curator who approves an entry must see it counted at once,
whichever process serves the next page. A decision about an entry that is or becomes listed is
announced through the accounts app's change announcement (`accounts.changes`: after the commit,
here at once and through Redis to every other process), and every `Kept` value is dropped on
it. A process keeps values only while it hears of every announcement; without Redis (the
embedded mode, where `approve_entries` in a shell is another process) nothing is kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from accounts import changes

T = TypeVar("T")


class Kept(Generic[T]):
    """One value, computed at most every `seconds` in this process and dropped on any change."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._value: tuple[float, T] | None = None
        self._generation = 0
        changes.on_change(self.clear)

    def get(self, compute: Callable[[], T]) -> T:
        if not changes.hears_every_change():
            return compute()
        held = self._value
        if held is not None and held[0] > time.monotonic():
            return held[1]
        generation = self._generation
        value = compute()
        with self._lock:
            if generation == self._generation:  # not dropped while it was computed
                self._value = (time.monotonic() + self.seconds, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._value = None


def listing_changed() -> None:
    """Drop what was derived from the listing, in every process, once the caller's transaction
    commits (the accounts change announcement, which drops cached authentication data too:
    decisions are rare enough for that)."""
    changes.announce_on_commit()
