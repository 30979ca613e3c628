"""What every way of claiming jobs offers the claimer (River's ``riverpilot.Pilot`` is the anchor:
how jobs are fetched is behind one call). A kind owns its statement, its parameters and its
pacing; the claimer only orders the kinds, lends them its connection and, to those that carry
them, the completer's waiting successes.

The kinds: the plain claim (``plain_claim.py``), the fair claim of fair_key tasks
(``fair_claim.py``) and the flow claim of limited jobs (``flow_claim.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .claim import ClaimedJob, ClaimResult

if TYPE_CHECKING:
    import psycopg

    from .outcomes import Outcome

# A claim's queues (None: all the worker serves): what a kind keeps its pacing by.
Scope = tuple[str, ...] | None


class Turn(enum.Enum):
    """When a kind claims in a round of the claimer."""

    LEAD = "lead"  # in the kinds' order, with the slots the kinds before it left
    FILL = "fill"  # after every leading kind, only with slots they all left
    CARRY = "carry"  # claims nothing: its statement only writes the waiting successes
    SKIP = "skip"  # not in this round


@dataclass(frozen=True, slots=True)
class Ask:
    """What the claimer asks a kind for: up to ``limit`` jobs of ``queues`` (None: all the
    worker serves), and the successes its statement writes (``done``: only a kind that
    ``carries``)."""

    limit: int
    queues: list[str] | None
    done: Sequence[ClaimedJob] = ()


@dataclass(slots=True)
class Taken:
    """What a kind's claim did, and how soon the claimer should claim again because of it
    (None: on the usual wake-ups; 0: at once)."""

    result: ClaimResult
    retry_in: float | None = None


class ClaimKind:
    """One way of claiming jobs. ``carries``: its statement writes successes (``done``)."""

    carries = False

    def turn(self, scope: Scope, now: float) -> Turn:
        """When this kind claims in a round for ``scope`` (``now``: the loop's clock)."""
        return Turn.LEAD

    async def claim(self, conn: psycopg.AsyncConnection[Any], ask: Ask) -> Taken:
        """Lease up to ``ask.limit`` jobs of ``ask.queues`` (None: all), writing ``ask.done``."""
        raise NotImplementedError

    def wants_written(self, pending: Sequence[Outcome]) -> bool:
        """Whether these unwritten outcomes should be written before this kind claims (the
        slots they hold count against its limits)."""
        return False

    async def refresh(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Look up what changes rarely (every reap interval; limits an operator set)."""

    def notified(self) -> None:
        """Jobs were deferred or released in a queue the worker serves, or the listener
        reconnected (notifications may have been missed)."""
