"""wait_for: poll a condition until it holds (what a test waits on in another process or
thread, which has no event to await), failing with what never happened."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(check: Callable[[], bool], what: str, deadline: float = 30.0,
             every: float = 0.05) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(every)
