"""The use cases: one module each, `run(Request) -> Result` (docs/architecture.md, "Settings and use cases").

The doors only translate: a CLI command parses its options into a Request (settings from
`dreamshard.config.settings.resolve`) and renders the Result; a DVC stage is a CLI command; a Prefect task wraps one
`run`. Results carry their warnings and what the work did, so no caller reads a library object's internals.

    inventory   an inventory file from a file, or the synthetic pool of the `inventory` section
    tasks       planning tasks from a table pool
    profile     measurements of an inventory's placements (one process), or the batched profile stage
    train       the cost ensemble, the policy, the outer loop, pre-training
    plan        a plan from a sharder (search, verification, TorchRec file)
    evaluate    one plan measured; plans of several sharders measured interleaved (the evaluate stage)
    publish     the gate and the plan store
    drift       the current plan re-measured against its recorded cost
    reproduce   the workspace a published plan came from
"""
