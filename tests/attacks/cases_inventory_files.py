"""Attacks on inventory files (`inventory validate`, `plan -i`): a table's constraints that do not fit its
features (`feature_names` it does not serve, one `pooling_factors` value per feature), and booleans written as
strings (`pooled: "false"` was read as false). Every way in applies the checks `inventory from-torchrec` applies:
one line naming the table and the field, exit 2, nothing written."""

from __future__ import annotations

from harness import Case, Refused, Table, written

#: A table line of the inventory, with the hostile part, and a needle of the refusal.
ROWS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "feature_names the table does not serve",
        "constraints: {feature_names: [zzz]}",
        ("table 'a'", "constraint 'feature_names' ['zzz'] is not the table's features ['a']"),
    ),
    (
        "two pooling_factors for a one-feature table",
        "constraints: {pooling_factors: [1, 2]}",
        ("table 'a'", "'pooling_factors' gives 2 values for its 1 features"),
    ),
    ('pooled: "false" (a string)', 'pooled: "false"', ("table 'a'", "pooled", "valid boolean")),
    ('pooled: "no" (a string)', 'pooled: "no"', ("table 'a'", "pooled", "valid boolean")),
    ("a constraint's boolean as a string", 'constraints: {enforce_hbm: "false"}', ("enforce_hbm", "valid boolean")),
    ("is_weighted as 0", "constraints: {is_weighted: 0}", ("is_weighted", "valid boolean")),
)


def inventory(extra: str) -> str:
    return (
        "name: inv\n"
        "tables:\n"
        f"  - {{name: a, num_embeddings: 100, embedding_dim: 8, pooling_factor: 1, {extra}}}\n"
        "  - {name: b, num_embeddings: 100, embedding_dim: 8, pooling_factor: 1}\n"
    )


def _cases() -> list[Case]:
    cases: list[Case] = []
    for what, extra, needles in ROWS:
        setup = written("bad.yaml", inventory(extra))
        cases.append(Refused(f"inventory validate: {what}", "inventory validate bad.yaml", needles, setup=setup))
        cases.append(
            Refused(f"plan: {what}", "plan -i bad.yaml -d 2 -s size_greedy -o plan.json", needles, setup=setup)
        )
    return cases


#: `inventory synth` draws each table's reuse histogram (a few ms a table): 100,000 tables took over 200 s and 1,000,000
#: was allowed. Refused at config.stages.MAX_SYNTH_TABLES, in one line, at once.
SYNTH_TOO_MANY: list[Case] = [
    Refused(
        "inventory synth -n 100000", "inventory synth -n 100000 -o big.yaml", "less than or equal to 10000", seconds=20
    ),
    Refused(
        "inventory synth with inventory.num_tables 100000 in --params",
        "inventory synth --params big-params.yaml -o big.yaml",
        ("big-params.yaml", "inventory.num_tables", "less than or equal to 10000"),
        setup=written("big-params.yaml", "inventory: {num_tables: 100000}\n"),
        seconds=20,
    ),
]

TABLE = Table("inventory files", _cases() + SYNTH_TOO_MANY)
