"""The use cases: one module each, a Request in and a Result out (docs/architecture/index.md, "Settings and use cases").

The doors only translate: a CLI command parses its options into a Request (settings from
`dreamshard.config.settings.resolve`), calls one use case and renders the Result; a DVC stage is a CLI command; a
Prefect task is one use-case call. Results carry their warnings and what the work did, so no door reads a library
object's internals (tests/test_import_rules.py checks what the doors import).

    inventory        an inventory from a file, the synthetic pool, a preset, a trace or a TorchRec model; push
    taskset          planning tasks from a table pool
    profile          measurements in one process, or the batched profile stage (dispatch: profiling/dispatch.py)
    train            the cost ensemble, the policy, the outer loop, pre-training
    plan             a plan from a sharder (search, verification, refinement, TorchRec file, stats, reasons)
    evaluate         one plan measured; plans of several sharders measured interleaved (the evaluate stage)
    explain          the stats report and what-if changes
    publish          THE path that changes what is current: publish, rollback, a reviewer's answer (its decision
                     publish_decide, its writes publish_write, its words publish_explain; the policy itself:
                     gate/publish_policy.py); review: the reviewer port; publication: its one result
    replan           the production loop's fast path
    drift            the current plan re-measured against its recorded cost
    plans            the plan store's list, show, incumbent, fsck, gc
    reproduce        the workspace a published plan came from
    torchrec         TorchRec plan files: export and import
    sharders         sharder names as the doors take them
    remote           the DVC remote of a repository
    pipeline         a pipeline workspace: init, status, one orchestrator run
    pipeline_steps   the orchestrator's steps and rules (workspace lock, params, stages, decide once)
    pipeline_publish the orchestrator's publish step (the publish use case under the run's runner)
"""
