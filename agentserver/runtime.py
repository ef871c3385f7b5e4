"""Process-level tuning of the long-running servers: daphne (`agentserver.asgi`) and the
Celery worker (`agentserver.celery`). Neither changes what any request does, only what it
costs; `tests/test_runtime.py` pins that.
"""

from __future__ import annotations

import functools
import gc
import sys

from django.conf import settings


def tune_gc() -> None:
    """Move everything alive now (modules, settings, caches: what a server loads at start)
    out of the cyclic collector's reach, and collect the young generation less often.

    Under load a daphne process allocated enough containers for a young collection every ten
    or so requests, and every few seconds the full collection walked every object loaded at
    start again, 50 to 110 ms during which no request moved. Frozen objects are never walked
    again, and with the higher threshold young collections come about thirty times less
    often; daphne's CPU per request went down, not up (interleaved runs, README).
    """
    threshold = settings.GC_GEN0_THRESHOLD
    gc.freeze()
    if threshold > 0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(threshold, gen1, gen2)


def cache_twisted_content_type() -> None:
    """Twisted parses every request's Content-Type through the `email` package, only to learn
    whether the body is a form it should decode (for us: never), which was ~9 % of daphne's
    CPU per SendMessage. The answer depends on the header's bytes alone and clients send the
    same few, so remember the last ones. Without Twisted loaded (another ASGI server), or if
    a Twisted release renames the function, nothing changes.
    """
    http = sys.modules.get("twisted.web.http")
    parse = getattr(http, "_parseContentType", None)
    if parse is None or hasattr(parse, "cache_info"):
        return
    http._parseContentType = functools.lru_cache(maxsize=64)(parse)
