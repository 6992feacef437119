"""A trainer whose checkpoints take SAVE_S seconds to build (a large model on a slow disk),
except a quick first one at step 10 (so that a test sees it train): trains until stopped or
suspended, then saves and leaves."""

from __future__ import annotations

import sys
import time

import torch

import trainer_shim

SAVE_S = float(sys.argv[1])


class SlowToSave(torch.nn.Linear):
    slow = False

    def state_dict(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self.slow:
            time.sleep(SAVE_S)
        return super().state_dict(*args, **kwargs)


model = SlowToSave(2, 1)
with trainer_shim.init() as job:
    step = job.restore(model)
    while not job.should_stop() and not job.should_suspend():
        step += 1
        job.report(step, loss=0.5)
        if step == 10:
            job.save_checkpoint(step, model)
            model.slow = True
        time.sleep(0.01)
    job.save_checkpoint(step, model)
