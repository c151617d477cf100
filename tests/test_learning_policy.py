"""The policy on the estimated MDP, against a KNOWN cost function (dreamshard.learning.toy.ToyCost)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from toy_cost import ToyCost

from dreamshard.config.learning import PolicyTrainConfig, TopologyConfig
from dreamshard.errors import InfeasiblePlacementError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.learning.mdp import EstimatedMDP
from dreamshard.learning.policy import Policy, episode_log_probs, masked_log_softmax, plan_with_policy, rollout
from dreamshard.learning.train_policy import train_policy
from dreamshard.placement.validate import check_placement
from dreamshard.sharders import get_sharder
from dreamshard.values import Inventory, Table, Task, Topology

TOPO = TopologyConfig(memory_per_device_gb=64.0)


def cost_greedy(toy: ToyCost, tables: list[Table], topology: Topology) -> dict[str, int]:
    """Greedy on the TRUE cost: tables in the MDP order, each on the legal device that minimises the
    resulting max device total (the strongest simple baseline for this cost function)."""
    mdp = EstimatedMDP(tables, topology, toy)
    while not mdp.done:
        mask = mdp.legal_mask()
        after = mdp.device_states + mdp.states[mdp.t]
        totals = toy.device_costs(after).sum(-1)
        current = toy.device_costs(mdp.device_states).sum(-1)
        best, best_key = -1, None
        for d in np.flatnonzero(mask):
            others = torch.cat([current[:d], current[d + 1 :]])
            key = (float(torch.maximum(totals[d], others.max() if len(others) else totals[d])), float(totals[d]))
            if best_key is None or key < best_key:
                best, best_key = int(d), key
        mdp.step(best)
    return mdp.placement()


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    pool = synth_inventory(60, seed=1)
    names = pool.table_names
    rng = np.random.default_rng(0)
    train_tasks = [
        Task(name=f"t{i}", tables=tuple(rng.choice(names[:40], 12, replace=False)), num_devices=4) for i in range(6)
    ]
    test_tasks = [
        Task(name=f"s{i}", tables=tuple(rng.choice(names[40:], 12, replace=False)), num_devices=4) for i in range(4)
    ]
    toy = ToyCost()
    cfg = PolicyTrainConfig(episodes=500, episodes_per_update=10, lr=3e-3, seed=0)
    policy, metrics = train_policy(pool, train_tasks, toy, cfg, progress=False, topology=TOPO)
    return pool, toy, policy, metrics, train_tasks, test_tasks


def _true_cost(pool: Inventory, toy: ToyCost, task: Task, placement: dict[str, int]) -> float:
    by = pool.by_name()
    return toy.costs([by[n] for n in task.tables], placement, task.num_devices).overall_ms


def test_policy_beats_random_and_matches_greedy(trained):
    pool, toy, policy, metrics, train_tasks, test_tasks = trained
    by = pool.by_name()
    rows = {"policy": [], "random": [], "cost_greedy": [], "best_lpt": []}
    for task in train_tasks + test_tasks:
        tables = [by[n] for n in task.tables]
        topo = TOPO.topology(task.num_devices)
        sub = pool.subset(list(task.tables))
        rows["policy"].append(_true_cost(pool, toy, task, plan_with_policy(policy, toy, tables, topo).placement))
        rows["random"].append(
            np.mean([_true_cost(pool, toy, task, get_sharder("random", seed=s).place(sub, topo)) for s in range(5)])
        )
        rows["cost_greedy"].append(_true_cost(pool, toy, task, cost_greedy(toy, tables, topo)))
        rows["best_lpt"].append(
            min(
                _true_cost(pool, toy, task, get_sharder(h).place(sub, topo))
                for h in ("dim_greedy", "size_greedy", "lookup_greedy", "size_lookup_greedy")
            )
        )
    mean = {k: float(np.mean(v)) for k, v in rows.items()}
    print("mean true cost (ms):", {k: round(v, 3) for k, v in mean.items()})
    # learning happened: estimated cost fell over training
    first = np.mean([u.mean_cost_ms for u in metrics.updates[:3]])
    last = np.mean([u.mean_cost_ms for u in metrics.updates[-3:]])
    assert last < first
    assert mean["policy"] < 0.85 * mean["random"]
    assert mean["policy"] <= 1.01 * mean["cost_greedy"]
    assert mean["policy"] <= mean["best_lpt"]


def test_sampling_never_worse_than_greedy_under_the_estimate(trained):
    pool, toy, policy, _, _, test_tasks = trained
    by = pool.by_name()
    for task in test_tasks[:2]:
        tables = [by[n] for n in task.tables]
        topo = TOPO.topology(task.num_devices)
        g = plan_with_policy(policy, toy, tables, topo)
        s = plan_with_policy(policy, toy, tables, topo, samples=8, seed=3)
        assert s.overall_ms <= g.overall_ms + 1e-9


def test_masking_never_yields_an_illegal_device():
    """Property test: random memory states and random (untrained) policies; every action is legal and
    the update's log-probabilities are those of the masked distribution."""
    rng = np.random.default_rng(0)
    toy = ToyCost()
    for trial in range(25):
        torch.manual_seed(trial)
        n, d = int(rng.integers(3, 15)), int(rng.integers(2, 7))
        tables = [
            Table(
                name=f"x{i}",
                num_embeddings=int(rng.integers(1_000, 3_000_000)),
                embedding_dim=int(rng.choice([16, 64, 128])),
                pooling_factor=float(rng.uniform(1, 30)),
            )
            for i in range(n)
        ]
        total_gb = sum(t.size_gb for t in tables)
        mem = max(max(t.size_gb for t in tables) * 1.05, total_gb / d * float(rng.uniform(1.1, 2.0)))
        topo = Topology(num_devices=d, memory_per_device_gb=mem)
        mdp = EstimatedMDP(tables, topo, toy)
        policy = Policy()
        try:
            ep = rollout(policy, mdp, "sample", torch.Generator().manual_seed(trial))
        except InfeasiblePlacementError as e:
            assert e.table in {t.name for t in tables}
            continue
        assert all(ep.masks[t, a] for t, a in enumerate(ep.actions))
        check_placement(Inventory(name="p", tables=tuple(tables)), ep.placement, topo)
        logp, ent = episode_log_probs(policy, ep)
        assert torch.isfinite(logp).all() and (ent >= -1e-6).all()
        # recompute step 0 directly: probability mass lives on legal devices only
        z = policy.encode(mdp.tables, mdp.batch_size)
        lp0 = masked_log_softmax(policy.logits(z[0].expand(d, -1), ep.cost_feats[0]), torch.from_numpy(ep.masks[0]))
        assert torch.allclose(lp0.exp()[torch.from_numpy(~ep.masks[0])], torch.tensor(0.0))
        assert torch.allclose(lp0[ep.actions[0]], logp[0], atol=1e-5)


def test_infeasible_raises_typed_error_naming_the_table():
    toy = ToyCost()
    big = Table(name="huge_table", num_embeddings=10_000_000, embedding_dim=128, pooling_factor=1.0)  # 4.77 GB
    small = Table(name="small", num_embeddings=1000, embedding_dim=16, pooling_factor=1.0)
    with pytest.raises(InfeasiblePlacementError, match="huge_table"):
        EstimatedMDP([small, big], Topology(num_devices=4, memory_per_device_gb=2.0), toy)
    # fits alone, but not after the others fill the devices
    t = [
        Table(name=f"m{i}", num_embeddings=3_000_000, embedding_dim=64, pooling_factor=1.0) for i in range(3)
    ]  # 0.72 GB
    with pytest.raises(InfeasiblePlacementError, match="'m[0-2]'") as ei:
        plan_with_policy(Policy(), toy, t, Topology(num_devices=2, memory_per_device_gb=1.0))
    assert ei.value.table.startswith("m")


def test_plans_other_device_counts(trained):
    pool, toy, policy, *_ = trained
    tables = list(pool.tables[:20])
    for d in (3, 8):
        ep = plan_with_policy(policy, toy, tables, TOPO.topology(d))
        assert set(ep.placement) == {t.name for t in tables}
        assert len(ep.costs.per_device) == d
        assert len(set(ep.placement.values())) > 1


def test_train_policy_rejects_tasks_with_unknown_tables():
    from dreamshard.errors import ConfigError

    pool = synth_inventory(5, seed=0)
    with pytest.raises(ConfigError, match="'nope'"):
        train_policy(
            pool,
            [Task(name="x", tables=("nope",), num_devices=2)],
            ToyCost(),
            PolicyTrainConfig(episodes=1),
            progress=False,
        )
