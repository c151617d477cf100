"""dreamshard: learned embedding-table sharding (DreamShard, NeurIPS 2022) with an MLOps shell."""

__version__ = "0.1.0"
