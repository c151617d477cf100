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


TABLE = Table("inventory files", _cases())
