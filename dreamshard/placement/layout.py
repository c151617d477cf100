"""Which sharding each table that cannot stay whole gets, so that the whole inventory packs
(docs/architecture/data-model.md, "Tables larger than a device").

A table is *forced* when its options (dreamshard.placement.options) hold no table-wise one in device memory: it is
larger than a device, or its constraints ask for a split, another type or a kernel only another type runs.
`choose_layout` gives each forced table its first option in the order a sharder ranks them (the heuristics: fewest
units first or their proxy; the learned sharders: the planning cost), lays the inventory out as units (`Layout`) and
packs it with the sharder's own placement. When packing fails it tries more shards or another type before giving up:
one forced table at a time moves to its next option (the one with the largest unit first), and the first layout that
packs is kept. When every forced table has run out of options, the whole table the packing could not place is cut
too (`_cut_too`: a 14 GB table fits a 16 GB device alone, not beside 8 GB of other tables' row blocks); the last
packing error is raised when no such table is left. On cuda a table may also be cached from host memory
(dreamshard.placement.options, "Memory tiers"): such layouts are tried only after every layout in device memory.
`layout_kernels` says which kernel a layout gives the tables it caches, for the plan to record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from dreamshard.errors import InfeasiblePlacementError
from dreamshard.placement.options import TableOption, check_constraints, options_or_error, table_options
from dreamshard.placement.validate import footprint
from dreamshard.values import DEFAULT_CACHE_LOAD_FACTOR, Inventory, Kernel, Table, Topology, parse_unit

T = TypeVar("T")
#: A sharder's packing of a layout: its placement of every unit (fixed ones on their devices), or
#: InfeasiblePlacementError.
Pack = Callable[["Layout"], T]
#: A sharder's order of one forced table's options, given the layout of the others at their current choice.
Rank = Callable[[Table, list[TableOption], "Layout"], list[TableOption]]


@dataclass(frozen=True)
class Layout:
    """An inventory laid out as units: tables whole unless `choices` cuts them; `fixed` the units whose device
    their type decides (row blocks, replicas)."""

    inventory: Inventory
    units: Inventory
    fixed: dict[str, int] = field(default_factory=dict)
    choices: dict[str, TableOption] = field(default_factory=dict)

    def kernels(self) -> tuple[dict[str, Kernel], dict[str, float]]:
        """(kernels, cache load factors) of the tables this layout caches from host memory (`TableOption.tier` 1),
        for the plan to record (the others' come from their constraints: dreamshard.placement.kernels)."""
        return layout_kernels(self.units)

    @property
    def free(self) -> list[Table]:
        """The units a sharder places (every unit that is not fixed)."""
        return [u for u in self.units.tables if u.name not in self.fixed]

    def with_option(self, option: TableOption) -> Layout:
        """This layout with `option` for its table instead."""
        return layout_of(self.inventory, {**self.choices, option.table.name: option})


def layout_of(inventory: Inventory, choices: Mapping[str, TableOption]) -> Layout:
    """`inventory` with each table in `choices` replaced, in its place, by that option's units."""
    if not choices:
        return Layout(inventory, inventory)
    units: list[Table] = []
    fixed: dict[str, int] = {}
    for t in inventory.tables:
        option = choices.get(t.name)
        if option is None or (option.kind == "table_wise" and not option.tier):
            units.append(t)
            continue
        units.extend(option.units())
        fixed.update(option.fixed())
    return Layout(inventory, Inventory(name=inventory.name, tables=tuple(units)), fixed, dict(choices))


def layout_kernels(units: Inventory) -> tuple[dict[str, Kernel], dict[str, float]]:
    """(kernels, cache load factors) by table of the units a memory tier fixed to a kernel (their constraints name
    the caching kernel alone: dreamshard.placement.options, "Memory tiers")."""
    kernels: dict[str, Kernel] = {}
    factors: dict[str, float] = {}
    for u in units.tables:
        c = u.constraints
        if c is not None and c.compute_kernels == ("fused_uvm_caching",):
            table = parse_unit(u.name).table
            kernels[table] = "fused_uvm_caching"
            factors[table] = c.cache_load_factor or DEFAULT_CACHE_LOAD_FACTOR
    return kernels, factors


def _plainly_whole(table: Table, topology: Topology) -> bool:
    """No constraints and small enough for one device: table-wise is an option (the quick test)."""
    return table.constraints is None and footprint(table, topology) <= topology.usable_memory_bytes


def forced_options(inventory: Inventory, topology: Topology) -> dict[str, list[TableOption]]:
    """{table: its options} for every forced table (module docstring). A one-line error for a table whose
    constraints contradict the topology or that no option fits."""
    check_constraints(inventory, topology)
    out: dict[str, list[TableOption]] = {}
    for t in inventory.tables:
        if _plainly_whole(t, topology):
            continue
        options = options_or_error(t, topology)
        if not any(o.kind == "table_wise" and not o.tier for o in options):  # not whole in device memory
            out[t.name] = options
    return out


def _largest_unit(option: TableOption) -> int:
    return max(u.size_bytes for u in option.units())


def choose_layout(
    inventory: Inventory,
    topology: Topology,
    pack: Pack[T],
    rank: Rank | None = None,
    extra: Mapping[str, TableOption] | None = None,
) -> tuple[Layout, T]:
    """The first layout that packs (module docstring) and its packing. `extra`: options chosen beforehand for
    tables that are not forced (a learned sharder's beneficial splits). Memory tiers by cost: the layouts with
    every forced table in device memory are tried first, and a table cached from host memory
    (`TableOption.tier` 1) only when none of them packs, or where the table has no option in device memory."""
    forced = forced_options(inventory, topology)
    in_hbm = {n: [o for o in opts if not o.tier] or opts for n, opts in forced.items()}
    if in_hbm != forced:
        try:
            return _choose(inventory, topology, pack, rank, extra, in_hbm)
        except InfeasiblePlacementError:
            pass
    return _choose(inventory, topology, pack, rank, extra, forced)


def _choose(
    inventory: Inventory,
    topology: Topology,
    pack: Pack[T],
    rank: Rank | None,
    extra: Mapping[str, TableOption] | None,
    forced: dict[str, list[TableOption]],
) -> tuple[Layout, T]:
    """`choose_layout` among the `forced` tables' options (each ranked by `rank`, device memory before host)."""
    chosen = {k: v for k, v in (extra or {}).items() if k not in forced}
    if rank is not None and forced:
        base = layout_of(inventory, {**chosen, **{n: opts[0] for n, opts in forced.items()}})
        by = inventory.by_name()
        forced = {n: sorted(rank(by[n], opts, base), key=lambda o: o.tier) for n, opts in forced.items()}
    at = dict.fromkeys(forced, 0)

    def attempt(where: Mapping[str, int]) -> tuple[Layout, T]:
        lay = layout_of(inventory, {**chosen, **{n: forced[n][i] for n, i in where.items()}})
        return lay, pack(lay)

    try:
        return attempt(at)
    except InfeasiblePlacementError as e:
        last = e
    while True:
        left = sorted(
            (n for n in at if at[n] + 1 < len(forced[n])), key=lambda n: (-_largest_unit(forced[n][at[n]]), n)
        )
        if not left:
            cut = _cut_too(inventory, topology, last, {**forced, **chosen})
            if cut is None:
                raise last
            forced[last.table], at[last.table] = cut, 0
            try:
                return attempt(at)
            except InfeasiblePlacementError as e:
                last = e
            continue
        for n in left:
            try:
                return attempt({**at, n: at[n] + 1})
            except InfeasiblePlacementError as e:
                last = e
        at[left[0]] += 1


def _cut_too(
    inventory: Inventory, topology: Topology, error: InfeasiblePlacementError, taken: Mapping[str, object]
) -> list[TableOption] | None:
    """The options that cut the whole table `error` names (fewest units first), when it is a table of `inventory`
    not cut yet (`taken`: the forced and chosen ones) and can be cut; else None."""
    table = inventory.by_name().get(error.table)
    if table is None or table.name in taken:
        return None
    options = [o for o in table_options(table, topology) if o.kind != "table_wise" or o.tier]
    return options or None
