"""Prefect flows for dreamshard: thin wiring over library functions (one task = one library call).

    profile_flow                 measure placements in batches (resumable; `gpu` work pool in production)
    train_cost_flow              fit the cost network on the measurements
    train_policy_flow            REINFORCE on the estimated MDP
    plan_and_publish_flow        plan, compare with heuristics, gate, (human approval), publish or reject
    retrain_on_inventory_change  the orchestrator: runs only what the inventory fingerprint says is needed

Import the flows from their modules (`from flows.orchestrator import retrain_on_inventory_change`);
this package import stays cheap.
"""
