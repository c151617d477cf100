"""The judge: grades plans by measuring them, with code the planner never uses (docs/benchmarks/judge.md).

    python bench/judge.py INVENTORY PLAN [PLAN ...] --rounds 5 --out result.json

The library (`dreamshard/`) never imports this, and this imports of the library only the plan's meaning
(`dreamshard.values`, `dreamshard.documents`, `dreamshard.placement`): no oracle, no cost model, no fitted
collective. Each device's fused forward and backward is timed in a worker process of its own (`judge_compute`),
each collective at the plan's own byte counts (`judge_bytes`) on 2 real ranks (`judge_comm`), or, for a declared
world (`Judge(world=(alpha_ms, gb_per_s))`, a world this host is not), charged alpha + bytes / bandwidth per
exchange at the same byte counts, or (`Judge(paced=True)`) at this machine's pace measured on the ranks at the start
of every round (alpha + beta x bytes fitted over sizes spanning the round's exchanges: timing each exchange alone
moved the same plan's figure by 6-20% from round to round). Plans are measured interleaved: every round measures
every plan, the order rotated by one each round, every plan of a round looking up the same ids per table (common
random numbers: `round_seed`).

    from judge import Judge
    with Judge(rounds=5) as judge:
        result = judge.judge(inventory, plans)      # JudgeResult: per plan, per round, per device
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_bytes import DeviceBytes, device_units, plan_bytes  # noqa: E402
from judge_comm import PACE_MIN_BYTES, PACE_POINTS, RANKS, CommRanks, fit_pace, pace_sizes  # noqa: E402
from judge_compute import ComputeWorker  # noqa: E402
from judge_indices import DEVICE_CAP_BYTES, MB, TABLE_CAP_BYTES  # noqa: E402
from judge_results import JudgeResult, JudgeSettings, PlanJudgement, PlanRound, prediction_error  # noqa: E402

from dreamshard.values import Costs, DeviceCost, Inventory, Plan, Table, parse_unit  # noqa: E402


def device_operators(units: Sequence[Table], batch: int, devices: int) -> list[dict[str, Any]]:
    """The fused operators one device runs: its pooled units in one TBE, its sequence units in one per width, at the
    global batch; data-parallel replicas the same way at the device's share of the batch (batch // devices)."""
    groups: dict[tuple[bool, bool, int], list[Table]] = {}
    for t in units:
        replica = parse_unit(t.name).kind == "replica"
        groups.setdefault((replica, t.pooled, 0 if t.pooled else t.embedding_dim), []).append(t)
    return [
        {
            "tables": [t.model_dump(mode="json") for t in tables],
            "batch": max(1, batch // devices) if replica else batch,
            "pooled": pooled,
        }
        for (replica, pooled, _), tables in sorted(groups.items())
    ]


def exchanges(nbytes: DeviceBytes) -> dict[str, list[tuple[float, bool]]]:
    """(bytes, reduces) of each timed exchange of a device, by direction: forward all-to-all and reduce-scatter;
    backward the all-to-all again, the reduce-scatter's all-gather and the all-reduce."""
    return {
        "fwd": [(nbytes.all_to_all, False), (nbytes.reduce_scatter, True)],
        "bwd": [(nbytes.all_to_all, False), (nbytes.reduce_scatter, False), (nbytes.all_reduce, True)],
    }


class Judge:
    """A judging session: one compute worker and 2 rank processes, started once (a context manager)."""

    def __init__(
        self,
        *,
        rounds: int = 5,
        warmup: int = 2,
        repeats: int = 7,
        comm_repeats: int = 15,
        seed: int = 0,
        world: tuple[float, float] | None = None,
        paced: bool = False,
    ) -> None:
        self.world = world  # (alpha ms, GB/s) of a declared world; None: the collectives timed on real ranks
        # paced: each round, this machine's pace (alpha + beta x bytes per exchange) measured on the ranks at
        # PACE_POINTS sizes spanning the round's exchanges, and every exchange of the round charged at it
        self.paced = paced and world is None
        self.pace: dict[bool, tuple[float, float]] = {}  # reduces -> (alpha ms, beta ms per byte), this round's
        self.settings = JudgeSettings(
            rounds=rounds,
            warmup=warmup,
            repeats=repeats,
            comm_repeats=comm_repeats,
            ranks=RANKS,
            seed=seed,
            table_cap_mb=TABLE_CAP_BYTES / MB,
            device_cap_mb=DEVICE_CAP_BYTES / MB,
            comm=comm_label(world, self.paced),
        )
        self.compute = ComputeWorker()
        self.ranks: CommRanks | None = None
        if world is None:
            try:
                self.ranks = CommRanks()
            except BaseException:
                self.compute.close()
                raise

    def close(self) -> None:
        self.compute.close()
        if self.ranks is not None:
            self.ranks.close()

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _comm_ms(self, items: list[tuple[float, bool]], devices: int) -> float:
        s = self.settings
        total = 0.0
        for nbytes, reduce in items:
            if nbytes > 0 and devices > 1 and self.world is not None:
                total += self.world[0] + nbytes / (self.world[1] * 1e6)  # bytes / (GB/s x 1e9) in ms
            elif nbytes > 0 and devices > 1 and self.paced:
                alpha, beta = self.pace[reduce]
                total += alpha + beta * nbytes
            elif nbytes > 0 and devices > 1 and self.ranks is not None:
                total += statistics.median(
                    self.ranks.time_exchange(nbytes, devices - 1, reduce, s.warmup, s.comm_repeats)
                )
        return total

    def measure_pace(self, inventory: Inventory, plans: Sequence[Plan]) -> None:
        """This round's pace on the ranks, with and without a reduction, over the sizes the plans exchange."""
        s = self.settings
        assert self.ranks is not None
        devices = plans[0].topology.num_devices
        exchanged = [
            n
            for plan in plans
            for nbytes in plan_bytes(inventory, plan)
            for items in exchanges(nbytes).values()
            for n, _ in items
            if n > 0
        ]
        spanned = pace_sizes(exchanged or [PACE_MIN_BYTES])
        self.pace = {
            reduce: fit_pace(self.ranks, spanned, max(1, devices - 1), reduce, s.warmup, s.comm_repeats)
            for reduce in (False, True)
        }

    def measure_device(self, units: Sequence[Table], nbytes: DeviceBytes, plan: Plan, seed: int) -> DeviceCost:
        """One device's four costs: its fused operators timed in the worker, then its exchanges on the ranks."""
        s, topo = self.settings, plan.topology
        if not units:
            return DeviceCost.zero()
        ops = device_operators(units, topo.batch_size, topo.num_devices)
        timed = self.compute.time_device(ops, s.warmup, s.repeats, seed)
        ex = exchanges(nbytes)
        return DeviceCost(
            fwd_compute=statistics.median(timed["fwd_ms"]),
            fwd_comm=self._comm_ms(ex["fwd"], topo.num_devices),
            bwd_comm=self._comm_ms(ex["bwd"], topo.num_devices),
            bwd_compute=statistics.median(timed["bwd_ms"]),
        )

    def measure_plan(self, inventory: Inventory, plan: Plan, seed: int) -> Costs:
        """One measurement of `plan` in the round whose ids' seed is `seed`: every device in turn (never two at once);
        overall = max of the totals."""
        units = device_units(inventory, plan)
        nbytes = plan_bytes(inventory, plan)
        per_device = [self.measure_device(u, b, plan, seed) for u, b in zip(units, nbytes, strict=True)]
        return Costs.from_devices(per_device)

    def judge(self, inventory: Inventory, plans: Sequence[Plan]) -> JudgeResult:
        """Every plan measured once per round for `rounds` rounds, round r in the plans' order rotated by r."""
        t0 = time.perf_counter()
        ids = [p.plan_id for p in plans]
        if len(set(ids)) != len(ids):
            raise ValueError("plans to judge need distinct plan_ids")
        rounds: dict[str, list[PlanRound]] = {i: [] for i in ids}
        order: list[tuple[str, ...]] = []
        for r in range(self.settings.rounds):
            if self.paced:
                self.measure_pace(inventory, plans)
            turn = rotated(list(range(len(plans))), r)
            order.append(tuple(ids[i] for i in turn))
            for pos, i in enumerate(turn):
                costs = self.measure_plan(inventory, plans[i], round_seed(self.settings.seed, r))
                rounds[ids[i]].append(PlanRound(round=r, position=pos, costs=costs))
        judged = tuple(
            PlanJudgement(plan_id=p.plan_id, sharder=p.sharder, rounds=tuple(rounds[p.plan_id])) for p in plans
        )
        return JudgeResult(
            inventory=inventory.name,
            settings=self.settings,
            plans=judged,
            order=tuple(order),
            seconds=time.perf_counter() - t0,
        )


def comm_label(world: tuple[float, float] | None, paced: bool) -> str:
    """How the judge charges the collectives (`JudgeSettings.comm`)."""
    if world is not None:
        return f"declared: {world[0]:g} ms + bytes at {world[1]:g} GB/s"
    if paced:
        return f"paced: alpha + beta x bytes measured on real ranks each round at {PACE_POINTS} sizes"
    return "timed on real ranks"


def round_seed(seed: int, r: int) -> int:
    """The ids' seed of round `r`: every plan of the round looks up the same ids per table (common random numbers,
    judge_indices.table_rng); the rounds differ."""
    return seed * 1_000_003 + r


def rotated(items: list[int], r: int) -> list[int]:
    """`items` rotated left by r: round r starts with the r-th plan, so each plan leads a round in turn."""
    if not items:
        return items
    k = r % len(items)
    return items[k:] + items[:k]


def judge_plans(inventory: Inventory, plans: Sequence[Plan], rounds: int = 5, **settings: Any) -> JudgeResult:
    """One judging session over `plans` (starts and ends the worker and the ranks)."""
    with Judge(rounds=rounds, **settings) as judge:
        return judge.judge(inventory, plans)


# ----------------------------------------------------------------------------------------- the CLI


def oracle_figure(plan: Plan) -> tuple[str, Costs | None]:
    """The oracle's costs a plan carries, and their label: measured first, else predicted."""
    if plan.measured is not None:
        return "measured", plan.measured
    if plan.predicted is not None:
        return "predicted", plan.predicted
    return "-", None


def render(result: JudgeResult, plans: Sequence[Plan]) -> Any:
    """A rich table: the judge's ms per plan, its spread, the oracle's figure and its error against the judge."""
    from rich.table import Table as RichTable

    out = RichTable(title=f"judge: {result.inventory}, {result.settings.rounds} interleaved rounds")
    for col in ("plan", "sharder", "judge ms", "spread", "oracle ms", "err overall", "err compute", "err comm"):
        out.add_column(col, justify="left" if col in ("plan", "sharder") else "right")
    judged = result.by_id()
    for plan in plans:
        j = judged[plan.plan_id]
        label, costs = oracle_figure(plan)
        cells = ["-", "-", "-", "-"]
        if costs is not None:
            e = prediction_error(j, costs)
            cells = [f"{costs.overall_ms:.2f} ({label})", f"{e.overall:+.0%}", f"{e.compute:+.0%}", f"{e.comm:+.0%}"]
        out.add_row(plan.plan_id, plan.sharder, f"{j.overall_ms:.2f}", f"{j.spread:.1%}", *cells)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from rich.console import Console

    from dreamshard.documents import load_inventory, load_plan

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inventory", type=Path)
    ap.add_argument("plans", type=Path, nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--comm-repeats", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="Write the JudgeResult as JSON here.")
    args = ap.parse_args(argv)
    inventory = load_inventory(args.inventory)
    plans = [load_plan(p) for p in args.plans]
    result = judge_plans(
        inventory,
        plans,
        rounds=args.rounds,
        warmup=args.warmup,
        repeats=args.repeats,
        comm_repeats=args.comm_repeats,
        seed=args.seed,
    )
    Console().print(render(result, plans))
    if args.out is not None:
        args.out.write_text(result.model_dump_json(indent=1) + "\n")


if __name__ == "__main__":
    main()
