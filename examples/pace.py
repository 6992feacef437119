"""An optional cap on a training loop's step rate (``--max-steps-per-second``).

Training normally runs flat out. ``mlsched demo`` runs up to seven training processes beside a
controller and two agents on one machine; paced, they leave the machine's cores to the control
plane whose story the demo tells.

Each step is followed by a pause of 1/N s, so the loop runs at most N steps a second. The pause
is fixed rather than topping each step up to 1/N: a DDP job's ranks leave each step's
all-reduce together, and a fixed pause after it keeps them together, where topping up from
each rank's own start would keep any skew between them and make the early rank wait it out in
every all-reduce. The iteration times the examples report (the step's own work) do not include
the pause.
"""

from __future__ import annotations

import time


class Pace:
    """A pause of ``1 / per_second`` seconds after each step; 0 (or less) pauses never."""

    def __init__(self, per_second: float) -> None:
        self.pause_s = 1.0 / per_second if per_second > 0 else 0.0

    def rest(self) -> None:
        """The pause after one step."""
        if self.pause_s:
            time.sleep(self.pause_s)
