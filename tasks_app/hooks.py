"""What the task store announces, for the layers above it.

The store never imports its subscribers: they subscribe from their `AppConfig.ready` (push
sends notifications for a task that has push configs), and the store calls `task_changed`
after each commit that changed a task. A subscriber's failure is its own: the write it
hears about is committed already, so it is logged and the other subscribers still hear.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskChanged:
    """A committed change of a task: its state after it, and whether it has push configs
    (read under the row lock, so a subscriber for push needs no query to know)."""

    task_id: str
    state: str
    has_push_configs: bool


Subscriber = Callable[[TaskChanged], None]

_subscribers: list[Subscriber] = []


def on_task_changed(subscriber: Subscriber) -> Subscriber:
    """Subscribe (once; subscribing again changes nothing). Usable as a decorator."""
    if subscriber not in _subscribers:
        _subscribers.append(subscriber)
    return subscriber


def task_changed(change: TaskChanged) -> None:
    for subscriber in _subscribers:
        try:
            subscriber(change)
        except Exception:  # noqa: BLE001 - the change is committed; one subscriber must not cost the others
            log.exception("a subscriber to task changes failed on task %s", change.task_id)
