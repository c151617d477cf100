"""The plan store's read and repair use cases: `plans list`, `plans show`, `plans incumbent`, `plans fsck`,
`plans gc` (docs/architecture/stores.md, "Stores"). What changes what is current (publish, rollback, a reviewer's
answer) is `publish.py`; reproducing a plan's workspace `reproduce.py`. Nothing here loads torch, except a stats
report (`show` with `stats`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dreamshard.config.publish import PublishConfig
from dreamshard.documents import check_outputs
from dreamshard.errors import ConfigError
from dreamshard.lazy import lazy_module
from dreamshard.pipeline.incumbent import NoIncumbent, no_incumbent, read_incumbent, save_incumbent
from dreamshard.store import fsck as store_fsck
from dreamshard.store import scan_plans
from dreamshard.store.inventories import get_inventory_version
from dreamshard.store.orphans import ORPHAN_GRACE_MINUTES, age, remove_orphans
from dreamshard.usecases.base import Request, Result
from dreamshard.usecases.stored import current_or_none, open_plan_store, stored_plan
from dreamshard.values import Plan, utcnow
from dreamshard.values.records import FsckIssue, GcResult, Orphan, PlanRecord

# the stats report imports torch: it loads when `show` is asked for one (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import explain as explain_uc
    from dreamshard.values.reports import PlanStats
else:
    explain_uc = lazy_module("dreamshard.usecases.explain")


class StoreRequest(Request):
    """A request on the plan store: `store` (None: publish.store_uri of the settings) and its S3 endpoint."""

    store: str | None = None
    endpoint_url: str | None = None


class ListRequest(StoreRequest):
    inventory: str | None = None  # None: every inventory's plans
    # an orphan younger than this may be a publish in flight (dreamshard.store.orphans)
    grace_minutes: float = ORPHAN_GRACE_MINUTES  # checked by dreamshard.store.orphans.grace_of (one line)


class ListResult(Result):
    records: list[PlanRecord]
    skipped: list[FsckIssue] = []  # what the store could not read through (a link out...), each with its fix
    orphans: list[Orphan] = []  # leftovers of interrupted publishes: not plans, not corrupt (`plans gc`)

    @property
    def corrupt(self) -> list[PlanRecord]:
        """The plans that failed verification (`problem` says why)."""
        return [r for r in self.records if r.problem]


def list_stored(request: ListRequest) -> ListResult:
    """Every stored plan (approved and rejected), checksum-verified, the current one of each inventory marked, and
    every path the store could not read through, skipped and named."""
    store = open_plan_store(request.settings, request.store, request.endpoint_url)
    listing = scan_plans(store, request.inventory, grace_minutes=request.grace_minutes)
    return ListResult(records=listing.records, skipped=listing.skipped, orphans=listing.orphans)


class FsckResult(Result):
    location: str  # the store checked
    issues: list[FsckIssue]


def fsck(request: ListRequest) -> FsckResult:
    """The whole store checked, nothing changed: pointers, checksums, records, orphans of interrupted publishes,
    stored inventory versions (one issue per problem, with its fix: a command names this store unless it is the
    default one)."""
    store = open_plan_store(request.settings, request.store, request.endpoint_url)
    issues = store_fsck(store, request.inventory, request.grace_minutes, store_flag(request))
    return FsckResult(location=store.location, issues=issues)


def store_flag(request: StoreRequest) -> str:
    """The options that name `request`'s store on a command line (`--store URI`, `--endpoint-url URL`); "" for the
    default store (publish.store_uri's default), which a command finds without them."""
    uri = request.store or request.settings.publish.store_uri
    parts = [] if uri == PublishConfig().store_uri else ["--store", shlex.quote(uri)]
    if request.endpoint_url:
        parts += ["--endpoint-url", shlex.quote(request.endpoint_url)]
    return " ".join(parts)


def orphan_age(orphan: Orphan) -> str:
    """How long ago the store wrote the orphan's newest leftover, in words ("40 s", "3.5 h")."""
    return age(orphan.written_at, utcnow())


class GcRequest(ListRequest):
    dry_run: bool = False  # say what would be removed, remove nothing


def gc(request: GcRequest) -> GcResult:
    """Remove the orphans of interrupted publishes older than the grace period (dreamshard.store.orphans: never an
    object a record or a pointer names); those within it may be a publish in flight and are kept."""
    store = open_plan_store(request.settings, request.store, request.endpoint_url)
    return remove_orphans(store, request.inventory, request.grace_minutes, request.dry_run)


class ShowRequest(StoreRequest):
    plan_id: str = "current"  # or a plan id
    inventory: str | None = None  # needed for 'current'
    stats: bool = False  # the stats report of the plan (its inventory version from the store)
    lineage: bool = False  # only the plan's lineage (PlanError-free: ConfigError when it has none)
    model: Path | None = None  # the model whose learned cost predicts the stats (default: settings.model_dir's)


@dataclass(frozen=True)
class ShowResult:
    """A stored plan, and its stats report when asked (a dataclass, not a pydantic Result: the stats' type
    lives in a module that loads torch, which listing and showing plans never import)."""

    plan: Plan
    stats: PlanStats | None = None
    warnings: list[str] = field(default_factory=list)


def show(request: ShowRequest) -> ShowResult:
    """A stored plan (checksum-verified), with its stats report when asked; with `lineage` the plan must have one."""
    store = open_plan_store(request.settings, request.store, request.endpoint_url)
    plan = stored_plan(store, request.plan_id, request.inventory, "show")
    if request.lineage and plan.lineage is None:
        raise ConfigError(f"plan {plan.plan_id} has no lineage (it was not published by the pipeline)")
    if not request.stats:
        return ShowResult(plan=plan)
    inv = get_inventory_version(store, plan.inventory_name, plan.inventory_fingerprint)
    if inv is None:
        raise ConfigError(
            f"the store holds no inventory version {plan.inventory_fingerprint[:12]} of "
            f"'{plan.inventory_name}' (push it: dreamshard inventory push)"
        )
    return ShowResult(plan=plan, stats=explain_uc.stats_of(inv, plan, request.model))


class IncumbentRequest(StoreRequest):
    out: Path
    inventory: str | None = None  # the store's current plan of this inventory (or a note that none is)
    source: Path | None = None  # an incumbent file to check and write in canonical form instead


class IncumbentResult(Result):
    out: Path
    plan: Plan | None  # None: the file says no plan was current
    reason: str = ""  # why none was (with `plan` None)


def incumbent(request: IncumbentRequest) -> IncumbentResult:
    """Write the incumbent a new inventory version is planned from (`plan --incumbent`; a pipeline workspace's
    inputs/incumbent.json): the store's current plan of `inventory`, or the checked `source` file."""
    if (request.inventory is None) == (request.source is None):
        raise ConfigError("give one of --inventory NAME (the store's current plan) and --from FILE")
    check_outputs({"--from": request.source}, {"--out": request.out})
    if request.source is not None:
        doc: Plan | NoIncumbent = read_incumbent(request.source)
    else:
        assert request.inventory is not None
        store = open_plan_store(request.settings, request.store, request.endpoint_url)
        plan = current_or_none(store, request.inventory)
        doc = plan if plan is not None else no_incumbent(request.inventory)
    save_incumbent(doc, request.out)
    if isinstance(doc, Plan):
        return IncumbentResult(out=request.out, plan=doc)
    return IncumbentResult(out=request.out, plan=None, reason=doc.reason)
