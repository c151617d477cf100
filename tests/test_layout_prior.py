"""GPU-credible layouts: where the learned cost does not know the device type (a model trained on
cpu planning for cuda, no calibration there), a table that cannot stay whole gets TorchRec's choice among its options
(a labelled prior); on cpu the cost decides; and every cut table's reason is in the plan and printed by `plan`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamshard.cli.app import invoke
from dreamshard.documents import save_inventory
from dreamshard.search.layout_prior import LayoutPrior, cut_types, prior_reason
from dreamshard.sharders import get_sharder
from dreamshard.values import CalibrationReport, Inventory, Table, Topology

#: 1.9 GB of weights on 1 GB devices: column_wise x2 or x4 (128 columns or wider) or row_wise x4
WIDE = Table(name="wide", num_embeddings=1_000_000, embedding_dim=512, pooling_factor=4.0)
INV = Inventory(
    name="wide",
    tables=(
        WIDE,
        *(Table(name=f"t{i}", num_embeddings=10_000 * (i + 1), embedding_dim=64, pooling_factor=2.0) for i in range(6)),
    ),
)


def _topo(device: str) -> Topology:
    return Topology(num_devices=4, memory_per_device_gb=1.0, device_type=device)


def _kind(plan_layout: str) -> str:
    return plan_layout.split(":")[0]


def test_on_cuda_without_calibration_a_forced_table_gets_torchrecs_choice_and_says_so() -> None:
    torchrec = cut_types(get_sharder("torchrec").shard(INV, _topo("cuda")))
    assert torchrec == {"wide": ("column_wise", 4)}  # TorchRec's own planner on cuda
    cuda = get_sharder("dreamshard").shard(INV, _topo("cuda"))
    assert len(cuda.column_shards["wide"]) == 4 and _kind(cuda.layouts["wide"]) == "column_wise x4"
    assert (
        "chosen by TorchRec's choice (prior: the model learned on cpu, with no calibration on cuda)"
        in (cuda.layouts["wide"])
    )
    assert "1.9 GB of weights, larger than a device" in cuda.layouts["wide"]
    assert "options column_wise x2, column_wise x4, row_wise x4" in cuda.layouts["wide"]
    # on cpu, the device the model learned on, the predicted cost chooses (here: 2 shards)
    cpu = get_sharder("dreamshard").shard(INV, _topo("cpu"))
    assert _kind(cpu.layouts["wide"]) == "column_wise x2" and cpu.layouts["wide"].endswith(
        "chosen by the predicted cost"
    )
    assert set(cpu.layouts) == set(cuda.layouts) == {"wide"}  # the whole tables have no line


def test_the_prior_applies_only_where_the_cost_does_not_know_the_device() -> None:
    calibrated = CalibrationReport(
        backend="cuda",
        probes=10,
        placements=2,
        seconds=1.0,
        mape_before=0.3,
        mape_after=0.1,
        scale_fwd=1.0,
        scale_bwd=1.0,
    )
    assert prior_reason(("cpu",), _topo("cuda"), None) == "the model learned on cpu, with no calibration on cuda"
    assert prior_reason(("cpu",), _topo("cuda"), calibrated) == ""  # calibrated on the plan's device type
    assert prior_reason(("cpu",), _topo("cpu"), None) == "" and prior_reason((), _topo("cuda"), None) == ""
    # a choice outside the options (TorchRec may cut more shards than devices) is named, and the cost decides
    prior = LayoutPrior(choices={"wide": ("column_wise", 8)}, basis="TorchRec's choice (prior: x)")
    from dreamshard.placement.options import table_options

    options = table_options(WIDE, _topo("cuda"))
    assert prior.prefer(WIDE, options) == list(options) and not prior.decides("wide", options)
    assert "TorchRec's choice, column_wise x8, is not among the options" in prior.chose(options[0])


def test_plan_prints_why_a_huge_table_got_its_layout(tmp_path: Path) -> None:
    huge = Table(name="huge", num_embeddings=1_000_000_000, embedding_dim=64, pooling_factor=4.0)
    inv = save_inventory(Inventory(name="huge", tables=(huge, WIDE)), tmp_path / "inv.yaml")
    args = ["plan", "-i", str(inv), "-d", "16", "-m", "16", "--device-type", "cuda", "-o", str(tmp_path / "p.json")]
    code, out, err = invoke(args)
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("layout: 'huge'"))
    assert "row_wise x16: 238.4 GB of weights" in line and "no column shards: dim 64 < 2 x min width 64" in line
    code, out, err = invoke([*args, "--json"])
    assert code == 0 and json.loads(out)["layouts"]["huge"].startswith("row_wise x16")


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_no_column_shard_is_narrower_than_the_minimum(device: str) -> None:
    plan = get_sharder("dreamshard").shard(INV, _topo(device))
    assert all(s.end - s.start >= 128 for shards in plan.column_shards.values() for s in shards)
