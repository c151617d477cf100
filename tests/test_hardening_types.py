"""Hostile inputs to the sharding types that landed with row-wise and data-parallel plans (the attack tables are
in tests/hardening_support.py; bench/hostile_types_cases.py reports the same cases as a table).

- Plan files with `row_shards` / `data_parallel` that are duplicated, colliding with unit names, out of range,
  mistyped, huge (100k shards: one short line, in seconds) or truncated: refused in one line by
  `plans publish --measure`, `compare --plan`, `torchrec export` and `whatif`, nothing written.
- `plans show` of a stored typed plan: shown; edited behind its checksum: refused.
- `whatif` moving or swapping a row shard or a replica: refused naming it (they have no device of their own).
- `plan` topology options and params.yaml `topology:` fields: zero, negative, huge, NaN/inf, bools, strings,
  inconsistent hosts, a reserve that leaves no table room (the error names the table and the limit), `--types`.
- TorchRec plan files: row ranges not matching ranks, uneven blocks, ranks out of world size, data-parallel on a
  subset, local_world_size not dividing world size: refused by `torchrec import` and `load_sharding_plan`.
"""

from __future__ import annotations

from pathlib import Path

import hardening_support as hs
import pytest


@pytest.mark.parametrize("command", hs.PLAN_COMMANDS)
@pytest.mark.parametrize("what", list(hs.PLAN_ATTACKS))
def test_plan_file_attack_is_refused_in_one_line(tmp_path: Path, what: str, command: str) -> None:
    ok, note = hs.run_plan_attack(tmp_path, what, command)
    assert ok, note


@pytest.mark.parametrize("command", hs.PLAN_COMMANDS)
def test_truncated_typed_plan_is_refused(tmp_path: Path, command: str) -> None:
    ok, note = hs.run_truncated(tmp_path, command)
    assert ok, note


def test_plans_show_prints_a_stored_typed_plan(tmp_path: Path) -> None:
    ok, note = hs.run_show(tmp_path, tamper=False)
    assert ok, note


def test_plans_show_refuses_a_stored_typed_plan_edited_behind_its_checksum(tmp_path: Path) -> None:
    ok, note = hs.run_show(tmp_path, tamper=True)
    assert ok, note
    assert "listed twice in data_parallel" in note


@pytest.mark.parametrize("what", list(hs.WHATIF_ATTACKS))
def test_whatif_refuses_moving_a_row_shard_or_replica(tmp_path: Path, what: str) -> None:
    ok, note = hs.run_whatif_attack(tmp_path, what)
    assert ok, note


@pytest.mark.parametrize("what", list(hs.TOPOLOGY_ATTACKS))
def test_plan_topology_option_attack_is_refused(tmp_path: Path, what: str) -> None:
    ok, note = hs.run_topology_attack(tmp_path, what)
    assert ok, note


@pytest.mark.parametrize("types", ["row_wise,row_wise", "row_wise,,data_parallel", ""])
def test_types_with_repeated_or_blank_entries_reads_the_named_set(tmp_path: Path, types: str) -> None:
    ok, note = hs.run_types_lenient(tmp_path, types)
    assert ok, note


@pytest.mark.parametrize("what", list(hs.PARAMS_ATTACKS))
def test_params_topology_field_attack_is_refused(tmp_path: Path, what: str) -> None:
    ok, note = hs.run_params_attack(tmp_path, what)
    assert ok, note


@pytest.mark.parametrize("via", ["import", "load"])
@pytest.mark.parametrize("what", list(hs.TORCHREC_ATTACKS))
def test_torchrec_file_attack_is_refused(tmp_path: Path, what: str, via: str) -> None:
    if via == "load":
        pytest.importorskip("torchrec")
    ok, note = hs.run_torchrec_attack(tmp_path, what, via)
    assert ok, note


def test_error_lines_of_huge_shard_lists_are_bounded() -> None:
    """The lists an error line quotes are cut to a few items (dreamshard.placement.expand.brief)."""
    from dreamshard.placement.expand import brief

    assert brief(list(range(3))) == "[0, 1, 2]"
    text = brief([0] * 100_000)
    assert len(text) < 80 and "(99992 more, 100000 in all)" in text
