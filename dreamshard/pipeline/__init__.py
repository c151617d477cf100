"""The pipeline's workspace: a git + DVC repository running dvc.yaml's stages (`workspace`), its DVC remotes (`dvc`),
the incumbent file (`incumbent`) and the decision tags on its commits (`decisions`) (docs/architecture/pipeline.md, "One
stage graph"). `params.yaml` and `dvc.yaml` here are the installed copies of the repository's own; the
orchestrator's steps and rules over them are `dreamshard.usecases.pipeline_steps`."""
