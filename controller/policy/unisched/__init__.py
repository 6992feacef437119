"""UniSched (Gao et al., TPDS 2024): Estimator + joint-MILP Selector as one policy."""

from controller.policy.unisched.config import UniSchedConfig
from controller.policy.unisched.policy import UniSchedPolicy

__all__ = ["UniSchedConfig", "UniSchedPolicy"]
