"""Per-step questions agreed among ranks without a collective at every step (issue 18 #3).

A training loop asks `should_stop()`, `should_suspend()` and, when elastic, whether a new batch
size or a regroup is due, at every step. Under torch.distributed every rank must get the same
answer at the same step, which takes a collective; one per question per step cost a gloo job
1.4 ms on a 1.9 ms step. A `PacedExchange` answers most calls from local state and exchanges
only at *sync calls*: every rank counts its calls to the question (the same count on every
rank, since all ranks call at the same steps), and at a sync call all ranks exchange their
values together with rank 0's choice of how many calls to wait before the next sync.

Rank 0 chooses that interval from its own measured call rate: as many calls as fit in
`period_s` seconds, between 1 and `max_interval`, and never past an event it sees coming (the
iteration budget running out). A stop or suspension therefore takes effect on every rank at the
same step, at most about `period_s` (plus one step) after a rank learned of it, and at its very
step when rank 0 saw it coming; the collectives cost one exchange per period, not per step
(Determined's preemption watcher likewise has the chief decide and the workers follow). Only
rank 0's clock counts, so the ranks never disagree about when to sync.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

__all__ = ["DEFAULT_MAX_INTERVAL", "DEFAULT_PERIOD_S", "Exchange", "PacedExchange"]

DEFAULT_PERIOD_S = 1.0  # the longest a rank's news waits for the next exchange, about
DEFAULT_MAX_INTERVAL = 10_000  # calls between two exchanges at most, however fast the steps

# Exchanges `values` (one list per rank, the same length on every rank) and returns the agreed
# list: the element-wise maximum over ranks, or rank 0's list, as the question needs.
Exchange = Callable[[list[int]], list[int]]


class PacedExchange:
    """One per-step question, exchanged among the ranks only at sync calls.

    `poll(values)` returns the agreed values at a sync call and None between them; `values` is
    called only at sync calls (so a one-time request is not consumed between them). The exchange
    function receives its result followed by one more integer, the interval rank 0 proposes (0 from
    the other ranks), and must return at least that element as rank 0 sent it (a maximum over
    ranks does, as does a broadcast from rank 0).
    """

    def __init__(
        self,
        exchange: Exchange,
        *,
        is_rank0: bool,
        period_s: float = DEFAULT_PERIOD_S,
        max_interval: int = DEFAULT_MAX_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if period_s < 0:
            raise ValueError(f"period_s must be >= 0, got {period_s}")
        if max_interval < 1:
            raise ValueError(f"max_interval must be >= 1, got {max_interval}")
        self._exchange = exchange
        self._is_rank0 = is_rank0
        self._period_s = period_s
        self._max_interval = max_interval
        self._clock = clock
        self.reset()

    def reset(self) -> None:
        """Start over: the next call exchanges (after a regroup, on every rank of the new group)."""
        self._calls_left = 0  # calls to answer locally before the next sync call
        self._interval = 1
        self._last_sync: float | None = None

    @property
    def interval(self) -> int:
        """Calls from one sync call to the next, as last agreed."""
        return self._interval

    def poll(
        self, values: Callable[[], Sequence[int]], *, horizon: int | None = None
    ) -> list[int] | None:
        """Count one call; at a sync call exchange `values()` and return the agreed ones.

        `horizon` (rank 0's): the calls after which an answer is already known to change (the
        iteration budget runs out, say); the next sync call is no later than that one."""
        if self._calls_left > 0:
            self._calls_left -= 1
            return None
        proposal = self._proposal() if self._is_rank0 else 0
        if self._is_rank0 and horizon is not None:
            proposal = max(1, min(proposal, horizon))
        agreed = self._exchange([*values(), proposal])
        self._interval = max(1, min(self._max_interval, int(agreed[-1])))
        self._calls_left = self._interval - 1
        return agreed[:-1]

    def _proposal(self) -> int:
        """Rank 0: the calls that fit in one period at the rate measured since the last sync."""
        now = self._clock()
        last, self._last_sync = self._last_sync, now
        if last is None:
            return 1
        elapsed = now - last
        if elapsed <= 0:
            return self._max_interval
        rate = self._interval / elapsed  # calls per second over the last interval
        return max(1, min(self._max_interval, math.floor(rate * self._period_s)))
