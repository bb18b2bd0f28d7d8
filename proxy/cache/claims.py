"""Single flight across proxy replicas: who leads an identical miss (no redis import here).

Within one replica, identical misses already share one upstream call (lookup.py, flight.py).
With several replicas on one Redis, a replica that is about to lead first `claim`s the flight;
if another replica holds it, this one waits until that replica `release`s it (its answer is then
in the shared store) and looks again. Followers across replicas get the stored answer, not a
live stream. Any doubt (Redis down, a claim that outlives its owner) resolves to leading: a
duplicate upstream call is the worst case, never a lost or wrong answer.

Streams and JSON requests claim apart, as their flights are apart within a replica: a JSON
answer does not answer a stream (serve.py: answered), so a stream claims the streams' flight
and never waits for a JSON leader (found by a review: with one claim for both, a stream waited
for another replica's JSON leader up to the flight wait, then went upstream all the same). A
stream's answer answers JSON twins: its leader also claims the JSON twins' flight when that is
free, so that JSON twins on other replicas wait for it.
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


def claimed(twins: str, streams: bool) -> str:
    """The flight a leader of these twins claims, and a twin that finds it claimed waits on."""
    return twins + ":stream" if streams else twins


async def lead(claims: Claims, twins: str, streams: bool, held: list[str]) -> bool:
    """Claim the twins' flight for this replica (each claim won appended to held, to be
    released), or False when another replica leads it."""
    first = claimed(twins, streams)
    if not await claims.claim(first):
        return False
    held.append(first)
    if streams and await claims.claim(twins):
        held.append(twins)
    return True
