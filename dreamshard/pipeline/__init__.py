"""The pipeline's workspace: a git + DVC repository running dvc.yaml's stages, its remotes and the incumbent file
(docs/architecture.md, "One stage graph"). `params.yaml` and `dvc.yaml` here are the installed copies of the
repository's own."""
