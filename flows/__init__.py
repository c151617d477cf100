"""dreamshard_flows: the Prefect orchestration of dreamshard, installed as `dreamshard_flows` from the top-level
flows/ folder. Wiring only: the pipeline's logic is the library's (dreamshard.usecases.pipeline_run), run under
`runner.PrefectRunner` (each step a task run); the library never imports this package.

    orchestrator.retrain_on_inventory_change   the stages of dvc.yaml in a workspace repo (DVC change detection),
                                               dvc push, then publish-plan
    publish.publish_workspace_plan             gate data/plan.json vs data/comparison.json, lineage, publish
    replan.replan_on_inventory_change          the fast path: a new inventory version planned, gated, published
    batch_flow.profile_batch_flow              one profiling batch -> one shard (the `gpu` work pool)
    fanout                                     the `workers` batch dispatcher: deployment runs, watched
    drift.drift_check_flow                     re-measure the current plan; emit dreamshard.plan.drifted
    deploy                                     every deployment, schedule and trigger
    runner.PrefectRunner                       the library's Runner on Prefect: tasks, subflow, pause, artifacts
    events, requests, artifacts                the events emitted, the flows' parameters, the UI's artifacts
    cli                                        `dreamshard pipeline ...` (the `dreamshard.cli` entry point)

Import the flows from their modules; this package import stays cheap.
"""
