"""dreamshard_flows: the Prefect orchestration of dreamshard, installed as `dreamshard_flows` from the top-level
flows/ folder. Thin wiring over library functions (one task = one library call); the library never imports it.

    orchestrator.retrain_on_inventory_change   the stages of dvc.yaml in a workspace repo (DVC change detection),
                                               dvc push, then publish-plan
    publish.publish_workspace_plan             gate data/plan.json vs data/comparison.json, lineage, publish
    batch_flow.profile_batch_flow              one profiling batch -> one shard (the `gpu` work pool)
    fanout                                     the profile stage: where batches run, watching worker runs
    drift.drift_check_flow                     re-measure the current plan; emit dreamshard.plan.drifted
    deploy                                     every deployment, schedule and trigger
    cli                                        `dreamshard pipeline ...`, `inventory push`, `plans reproduce`

Import the flows from their modules; this package import stays cheap.
"""
