"""`dreamshard inventory preset`: Criteo Kaggle / Terabyte inventories from their public cardinalities."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dreamshard.cli.app import main
from dreamshard.documents import load_inventory
from dreamshard.errors import ConfigError, InfeasiblePlacementError
from dreamshard.inventory.presets import PRESETS, preset_inventory
from dreamshard.sharders import get_sharder
from dreamshard.values import GB, Topology

TERABYTE = [
    45833188,
    36746,
    17245,
    7413,
    20243,
    3,
    7114,
    1441,
    62,
    29275261,
    1572176,
    345138,
    10,
    2209,
    11267,
    128,
    4,
    974,
    14,
    48937457,
    11316796,
    40094537,
    452104,
    12606,
    104,
    35,
]
KAGGLE = [
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
]
#: Fingerprints of the default presets. A change here changes every stored plan and measurement of a preset
#: inventory (they no longer match it): only on purpose, with a note in the changelog.
FINGERPRINTS = {
    "criteo-kaggle": "e6c4bdb6a28aaaa1b64a5cc3493b0170017d37a2c525ad27bf7feb39ac20daec",
    "criteo-terabyte": "5bca3145a5167f48204e5523be1d3412fb922aa35b8d8fa73e99cc1e727b2698",
}


@pytest.mark.parametrize(("preset", "rows", "dim"), [("criteo-kaggle", KAGGLE, 16), ("criteo-terabyte", TERABYTE, 128)])
def test_cardinalities_names_and_defaults(preset: str, rows: list[int], dim: int) -> None:
    inv = preset_inventory(preset)
    assert inv.name == preset
    assert [t.num_embeddings for t in inv.tables] == rows
    assert inv.table_names == [f"t_cat_{i}" for i in range(26)]  # TorchRec's DLRM example names
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) for n in inv.table_names)
    assert {t.embedding_dim for t in inv.tables} == {dim}
    assert {t.pooling_factor for t in inv.tables} == {1.0} and {t.dtype for t in inv.tables} == {"fp32"}
    for t in inv.tables:
        assert t.access_histogram is not None and abs(sum(t.access_histogram) - 1) < 1e-3
    tiny = inv.tables[rows.index(3)].access_histogram  # 3 rows, 2048 lookups: every row is hit hundreds of times
    assert tiny is not None and sum(tiny[:8]) == 0


def test_fingerprints_stable_and_arguments_respected() -> None:
    for preset in PRESETS:
        assert preset_inventory(preset).fingerprint() == FINGERPRINTS[preset]
    a = preset_inventory("criteo-kaggle", dim=64, pooling=3.0, name="k64")
    assert a == preset_inventory("criteo-kaggle", dim=64, pooling=3.0, name="k64")
    assert (
        a.name == "k64"
        and {t.embedding_dim for t in a.tables} == {64}
        and {t.pooling_factor for t in a.tables} == {3.0}
    )
    assert a.fingerprint() != FINGERPRINTS["criteo-kaggle"]
    skewed = preset_inventory("criteo-kaggle", zipf_exponent=1.5)
    flat = preset_inventory("criteo-kaggle", zipf_exponent=0.5)
    big = KAGGLE.index(10131227)  # heavier skew: more of one batch's unique rows are hit more than once
    assert skewed.tables[big].access_histogram[0] < flat.tables[big].access_histogram[0]  # type: ignore[index]
    assert preset_inventory("criteo-kaggle", pooling=0.0).tables[0].access_histogram is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"preset": "criteo"}, "unknown preset 'criteo'; choose from criteo-kaggle, criteo-terabyte"),
        ({"dim": 6}, "dim 6 is not a positive multiple of 4 (FBGEMM needs dim % 4 == 0); try --dim 8"),
        ({"dim": 0}, "dim 0 is not a positive multiple of 4"),
        ({"pooling": -1.0}, "pooling factor must be a finite number >= 0"),
        ({"zipf_exponent": 0.0}, "zipf exponent must be in (0, 4]"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    args = {"preset": "criteo-kaggle", **kwargs}
    with pytest.raises(ConfigError) as ei:
        preset_inventory(**args)  # type: ignore[arg-type]
    assert message in str(ei.value)


def test_terabyte_at_dim_128_does_not_fit_table_wise() -> None:
    """84.9 GB on 8 x 16 GB devices: enough memory in total, but three tables are larger than one device."""
    inv = preset_inventory("criteo-terabyte")
    assert sum(t.size_gb for t in inv.tables) < 8 * 16
    assert [t.name for t in inv.tables if t.size_gb > 16] == ["t_cat_0", "t_cat_19", "t_cat_21"]
    with pytest.raises(InfeasiblePlacementError) as ei:
        get_sharder("size_greedy").place(inv, Topology(num_devices=8, memory_per_device_gb=16.0))  # whole tables
    assert ei.value.table == "t_cat_0" and ei.value.table_gb == pytest.approx(45833188 * 128 * 4 / GB)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


def test_cli_writes_a_valid_inventory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "kaggle.yaml"
    code, out, err = _cli(
        ["inventory", "preset", "criteo-kaggle", "--dim", "32", "--pooling", "2", "-o", str(out_file)], capsys
    )
    assert code == 0 and err == ""
    inv = load_inventory(out_file)
    assert inv == preset_inventory("criteo-kaggle", dim=32, pooling=2.0)
    assert "26 tables" in out and inv.fingerprint() in out
    code, out, _ = _cli(["inventory", "validate", str(out_file)], capsys)
    assert code == 0 and f"fingerprint: {inv.fingerprint()}" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["criteo-kaggle", "--dim", "10"], "ConfigError: dim 10 is not a positive multiple of 4"),
        (["criteo-kaggle", "--dim", "x"], "UsageError"),
        (["criteo-1tb"], "ConfigError: unknown preset 'criteo-1tb'"),
    ],
)
def test_cli_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out_file = tmp_path / "inv.yaml"
    code, _, err = _cli(["inventory", "preset", *args, "-o", str(out_file)], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not out_file.exists()
