"""The one backoff: the wait before retry number ``attempt`` doubles from ``first`` up to
``cap``; with jitter (the default) it is drawn uniformly between half and all of that
("equal jitter": callers that failed together spread out, and no wait comes near zero, so
a failing dependency is not hammered by the unlucky draws). Without jitter it is the bare
schedule, for waits a test or a document states exactly (a child's restart, a breaker's
cool-down). Imports nothing of tenantry: the server and the client SDK share it."""

from __future__ import annotations

import random
from collections.abc import Callable

#: Past this many doublings every sane ``first`` is past its ``cap`` (and 2.0 ** 1024
#: would overflow a float).
_MAX_DOUBLINGS = 62


def backoff(attempt: int, *, first: float, cap: float, jitter: bool = True,
            rng: Callable[[], float] = random.random) -> float:
    """The wait before retry ``attempt`` (1-based: the first retry waits ``first``; 0 or
    less counts as 1). ``rng`` returns a float in [0, 1): pass a seeded
    ``random.Random(...).random`` for a repeatable schedule."""
    delay = min(cap, first * 2.0 ** min(max(attempt - 1, 0), _MAX_DOUBLINGS))
    return delay * (0.5 + 0.5 * rng()) if jitter else delay
