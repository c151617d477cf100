"""The learned models and their training (docs/architecture/learning.md, "Learning"): table features, the cost ensemble
and the pessimistic planning cost, the estimated MDP and the placement policy, the outer measure -> fit -> RL loop,
pre-training, and model storage. Planning on them is `dreamshard.search`; measuring candidates at plan time is
`dreamshard.measured`; explaining a plan is `dreamshard.explain`.

Importing this package does not import torch; the submodules that need it do.
"""

from dreamshard.config.learning import (
    CostTrainConfig,
    LoopConfig,
    PolicyTrainConfig,
    TasksConfig,
    TopologyConfig,
)

__all__ = ["CostTrainConfig", "LoopConfig", "PolicyTrainConfig", "TasksConfig", "TopologyConfig"]
