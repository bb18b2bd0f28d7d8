"""Single flight across proxy replicas: who leads an identical miss (no redis import here).

Within one replica, identical misses already share one upstream call (lookup.py, flight.py).
With several replicas on one Redis, a replica that is about to lead first `claim`s the flight;
if another replica holds it, this one waits until that replica `release`s it (its answer is then
in the shared store) and looks again. Followers across replicas get the stored answer, not a
live stream. Any doubt (Redis down, a claim that outlives its owner) resolves to leading: a
duplicate upstream call is the worst case, never a lost or wrong answer.
"""

from __future__ import annotations

from typing import Protocol


class Claims(Protocol):
    async def claim(self, flight: str) -> bool:
        """True: this replica leads the flight (or cannot tell); False: another one does."""
        ...

    async def release(self, flight: str) -> None:
        """This replica's flight ended (stored or abandoned): wake the other replicas."""
        ...

    async def settled(self, flight: str, wait_s: float) -> None:
        """Returns when the flight another replica claimed is released or gone, or after
        wait_s."""
        ...

    async def aclose(self) -> None: ...


class NoClaims:
    """One replica (or the embedded store): every flight is this replica's own."""

    async def claim(self, flight: str) -> bool:
        return True

    async def release(self, flight: str) -> None:
        return None

    async def settled(self, flight: str, wait_s: float) -> None:
        return None

    async def aclose(self) -> None:
        return None
