"""trainer_shim: what a PyTorch training script imports to run under mlsched.

```python
import trainer_shim

with trainer_shim.init() as job:
    step = job.restore(model, optimizer=opt)
    while not job.should_stop():
        ...  # one iteration
        step += 1
        job.report(step, loss=loss, metrics={"accuracy": acc})
        if job.should_suspend():
            job.save_checkpoint(step, model, optimizer=opt)
            break
```

Under a node agent (MLSCHED_TASK_ID set) the context talks to the agent over the trainer
session (docs/task-environment.md); without one, the same API runs locally with no agent.
This package imports only the standard library, torch, grpc, protobuf and `mlsched.v1`.
"""

import importlib.util

if importlib.util.find_spec("torch") is None:  # the base install has no torch: say which extra
    raise ModuleNotFoundError(
        "trainer_shim needs torch, not installed here: install mlsched[shim] (torch==2.13.0 first,"
        " then pip install 'mlsched[shim]')",
        name="torch",
    )

from trainer_shim.context import JobContext, RestoreInfo, init
from trainer_shim.elastic import Scale
from trainer_shim.env import TaskEnv, parse_env
from trainer_shim.stopping import StoppingCriteria, Target

__all__ = [
    "JobContext",
    "RestoreInfo",
    "Scale",
    "StoppingCriteria",
    "Target",
    "TaskEnv",
    "init",
    "parse_env",
]
