"""The learned part of dreamshard (docs/architecture.md, "Learning"): table features, the cost ensemble and the
pessimistic planning cost, the estimated MDP and the placement policy, search on the learned cost and
verification, column splits, training (the outer measure -> fit -> RL loop, pre-training), and model storage.

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
