"""Integrations with the frameworks that run a plan (docs/architecture/measuring.md, "Integrations"; docs/torchrec.md).

`torchrec_file`: the plan file TorchRec users receive (no torch needed); `torchrec`: that file (or a Plan) as
TorchRec's ``ShardingPlan`` and back; `torchrec_model`: a TorchRec model and its batches as an inventory;
`torchrec_current`: the training job's call, the store's current plan for its model. The harness that runs real
``DistributedModelParallel`` steps serves only the tests and bench, so it lives with them (tests/dmp_support.py).
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
