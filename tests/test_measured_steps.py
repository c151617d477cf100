"""The searching sharder's measured steps as one ordered list of typed configs (dreamshard.measured.steps):
calibrate before the search, verify and refine after it, each on the sharder's oracle."""

from __future__ import annotations

import pytest

from dreamshard.errors import ConfigError
from dreamshard.inventory.synth import synth_inventory
from dreamshard.measured.steps import Calibrate, Refine, Verify, check_order, measured_steps
from dreamshard.profiling.oracle import Oracle
from dreamshard.profiling.simulator import SimulatorBackend
from dreamshard.sharders import get_sharder
from dreamshard.values import Topology

TOPO = Topology(num_devices=3, memory_per_device_gb=16.0, batch_size=2048)


def test_the_settings_make_the_steps_in_order_and_leave_out_what_is_off() -> None:
    assert measured_steps() == ()
    steps = measured_steps(verify=2, verify_rounds=1, calibrate_seconds=1.0, refine_seconds=0.5)
    assert [s.kind for s in steps] == ["calibrate", "verify", "refine"]
    assert steps[1] == Verify(candidates=2, rounds=1) and steps[2] == Refine(seconds=0.5)
    assert measured_steps(verify=3) == (Verify(candidates=3),)  # rounds: the default


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"verify": -1}, "plan.verify must be >= 0"),
        ({"verify_confidence": 1.0}, r"plan.verify_confidence must be in \[0.5, 1\)"),
        ({"calibrate_seconds": 601.0}, r"plan.calibrate_seconds must be in \[0, 600\]"),
        ({"refine_seconds": -1.0}, "plan.refine_seconds must be in"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        measured_steps(**kwargs)  # type: ignore[arg-type]


def test_a_list_out_of_order_or_twice_is_refused_and_so_are_both_ways_at_once() -> None:
    check_order([Calibrate(seconds=1.0), Verify(candidates=2), Refine(seconds=1.0)])
    with pytest.raises(ConfigError, match="in the order calibrate, verify, refine"):
        check_order([Verify(candidates=2), Calibrate(seconds=1.0)])
    with pytest.raises(ConfigError, match="at most one of each"):
        check_order([Verify(candidates=2), Verify(candidates=3)])
    with pytest.raises(ConfigError, match="as `steps` or as the plan.verify"):
        get_sharder("dreamshard", verify=2, steps=(Verify(candidates=2),))


def test_typed_steps_plan_as_the_flat_options_do() -> None:
    """`steps=(Verify(...),)` is the same sharder as `verify=K, verify_rounds=R`: the same plan, verified."""
    inv = synth_inventory(10, 3, name="steps")

    def plan(**options: object) -> object:
        oracle = Oracle(SimulatorBackend(), warmup=0, repeats=1)
        return get_sharder("dreamshard", oracle=oracle, seed=1, **options).shard(inv, TOPO)

    flat = plan(verify=2, verify_rounds=1)
    typed = plan(steps=(Verify(candidates=2, rounds=1),))
    assert flat.verification is not None and typed.verification is not None  # type: ignore[attr-defined]
    assert flat.placement == typed.placement  # type: ignore[attr-defined]
    unmeasured = get_sharder("dreamshard", seed=1).shard(inv, TOPO)
    assert unmeasured.verification is None and unmeasured.measured is None
