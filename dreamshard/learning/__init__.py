"""The learned part of dreamshard (docs/architecture.md, "Learning"): table features, the cost network, the estimated
MDP and the placement policy, their training, the outer measure -> fit -> RL loop, and model storage.

Importing this package does not import torch; the submodules that need it do.
"""

from dreamshard.learning.configs import (
    CostTrainConfig,
    LoopConfig,
    PolicyTrainConfig,
    TasksConfig,
    TopologyConfig,
)

__all__ = ["CostTrainConfig", "LoopConfig", "PolicyTrainConfig", "TasksConfig", "TopologyConfig"]
