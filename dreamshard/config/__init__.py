"""One home for configuration: the sections of params.yaml and `resolve`, their one reader
(docs/architecture/index.md, "Settings and use cases").

    settings   `resolve(params, overrides)` -> `Settings`, every section typed
    stages     the sections of the pipeline's stages (inventory, plan, evaluate, pipeline, drift)
    profile    the `profile` section: how measurements are made (`ProfileConfig`)
    learning   tasks, topology, train_cost, train_policy, train, pretrain and the search's options
    publish    the `publish` section: the gate's rules and baselines, where plans are stored
"""
