"""Integrations with the frameworks that run a plan.

``dreamshard.integrations.torchrec_file`` is the plan file TorchRec users receive (no torch needed);
``dreamshard.integrations.torchrec`` turns it (or a Plan) into TorchRec's ``ShardingPlan`` and back;
``torchrec_model`` reads a TorchRec model and its KeyedJaggedTensor batches into an inventory
(``inventory_from_module``); ``torchrec_current`` is the training job's call, the store's current plan for its
model (``load_current_sharding_plan``). The harness
that runs real ``DistributedModelParallel`` training steps on CPU ranks serves only the tests and
``bench/dmp_step.py``, so it lives with them (``tests/dmp_support.py``).
"""

from __future__ import annotations

from dreamshard.errors import DreamshardError


class MissingDependencyError(DreamshardError):
    """An optional package that this feature needs is not installed (the message says how to install it)."""


TORCHREC_INSTALL_HINT = "pip install torchrec fbgemm-gpu-cpu (fbgemm-gpu on CUDA hosts)"


def require_torchrec() -> None:
    """Raise MissingDependencyError (one line, with the install command) unless torchrec imports."""
    try:
        import torchrec.distributed.sharding_plan  # noqa: F401  # optional dependency: torchrec
    except ImportError as e:
        raise MissingDependencyError(f"this needs torchrec ({e}); install it: {TORCHREC_INSTALL_HINT}") from None
