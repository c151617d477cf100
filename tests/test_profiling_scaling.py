"""The scaling rule keeps dims and bounds memory; profiling 100 tables on one device stays under 4 GB."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from dreamshard.profiling.scaling import CPU_RULE, MB, ScalingRule, padded_dim
from dreamshard.values import Table


def test_rows_are_capped_by_bytes_and_row_cap() -> None:
    big = Table(name="big", num_embeddings=50_000_000, embedding_dim=64, pooling_factor=10)
    small = Table(name="small", num_embeddings=1_000, embedding_dim=64, pooling_factor=10)
    assert CPU_RULE.table_rows(big) * 64 * 4 <= 16 * MB
    assert CPU_RULE.table_rows(small) == 1_000
    assert ScalingRule(row_cap=500).table_rows(small) == 500
    assert padded_dim(6) == 8 and padded_dim(16) == 16


def test_device_budget_bounds_many_tables() -> None:
    tables = [Table(name=f"t{i}", num_embeddings=10_000_000, embedding_dim=128, pooling_factor=5) for i in range(1000)]
    assert CPU_RULE.device_bytes(tables) <= CPU_RULE.max_device_bytes + 1000 * CPU_RULE.min_rows * 128 * 4
    assert CPU_RULE.device_bytes(tables[:100]) <= 100 * 16 * MB


def test_profiling_100_tables_on_one_device_stays_under_4gb() -> None:
    """Peak RSS of a fresh process measuring a 100-table (~100 GB unscaled) inventory all on one device."""
    code = textwrap.dedent(
        """
        import json, resource
        from dreamshard.profiling import make_oracle
        from dreamshard.values import Inventory, Table, Topology
        tables = tuple(Table(name=f"t{i}", num_embeddings=4_000_000, embedding_dim=(16, 32, 64, 128)[i % 4],
                             pooling_factor=(1, 5, 20)[i % 3]) for i in range(100))
        inv = Inventory(name="big", tables=tables)
        topo = Topology(num_devices=1, memory_per_device_gb=1000, batch_size=256)
        o = make_oracle("cpu", warmup=1, repeats=1)
        m = o.measure(inv, {t.name: 0 for t in tables}, topo)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        print(json.dumps({"peak": peak, "ms": m.overall_ms, "unscaled_gb": sum(t.size_gb for t in tables)}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["unscaled_gb"] > 50 and res["ms"] > 0
    assert res["peak"] < 4 * 1024**3, res
