"""THE key layout of the store: every plan-store and inventory-store key is built and parsed here, nowhere else.

    plans/<inventory>/current.json                                the pointer (dreamshard.store.pointer)
    plans/<inventory>/<fingerprint>/<plan_id>.json                 an approved plan          kind "plan"
    plans/<inventory>/<fingerprint>/<plan_id>.json.sha256          its checksum (sha256sum)   kind "checksum"
    plans/<inventory>/<fingerprint>/<plan_id>.json.record          its record (JSON)          kind "record"
    plans/<inventory>/<fingerprint>/rejected/<plan_id>.json[...]   the same for rejected plans
    plans/<inventory>/<fingerprint>/pending/<plan_id>.json[...]    the same for plans waiting for a reviewer
    inventories/<inventory>/<fingerprint>.yaml                     a pushed inventory version
    inventories/<inventory>/current.json                           the current inventory version

Collision-free by construction: every segment is a safe name (`check_key_part`: no '/', never empty, never
'..'), the three kinds end in different last suffixes ('.json', '.sha256', '.record') and a plan key always ends
in '.json', so no key of one kind is another kind's key or another plan's key (plan `p.record` is
`p.record.json`; plan `p`'s record is `p.json.record`). The status is the depth (4 segments approved,
5 with `rejected/` or `pending/`), so a fingerprint or plan id named `rejected`, `pending` or `current` is just data.
`plan_key` and `parse_key` are inverse: `parse_key(plan_key(*k)) == k`. Plan ids are data, never structure:
code that needs the inventory, fingerprint, plan id, kind or status of a key asks `parse_key`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from dreamshard.values.names import check_key_part, name_problem
from dreamshard.values.records import Status

ROOT = "plans"
INVENTORIES = "inventories"
CURRENT = "current.json"
REJECTED = "rejected"
PENDING = "pending"
#: The folder of each status below a version's folder (approved plans sit in it directly).
STATUS_FOLDER: dict[Status, str] = {"approved": "", "rejected": f"{REJECTED}/", "pending": f"{PENDING}/"}
PLANS_PREFIX = f"{ROOT}/"  # every plan-store key starts with this

Kind = Literal["plan", "checksum", "record"]
KINDS: tuple[Kind, ...] = get_args(Kind)

#: The leaf suffix of each kind. Their last dotted parts differ, so a leaf has at most one kind.
SUFFIX: dict[Kind, str] = {"plan": ".json", "checksum": ".json.sha256", "record": ".json.record"}


@dataclass(frozen=True)
class PlanKey:
    """One plan-store object: which plan, which of its objects, approved or rejected. Constructing one checks
    every part (StoreError when a name is not a safe key segment)."""

    inventory: str
    fingerprint: str
    plan_id: str
    kind: Kind = "plan"
    status: Status = "approved"

    def __post_init__(self) -> None:
        check_key_part(self.inventory, "inventory name")
        check_key_part(self.fingerprint, "inventory fingerprint")
        check_key_part(self.plan_id, "plan id")
        if self.kind not in SUFFIX or self.status not in STATUS_FOLDER:
            raise ValueError(f"unknown plan object kind {self.kind!r} / status {self.status!r}")

    @property
    def key(self) -> str:
        return f"{ROOT}/{self.inventory}/{self.fingerprint}/{STATUS_FOLDER[self.status]}{self.leaf}"

    @property
    def leaf(self) -> str:
        """The object's name inside its folder (what a sha256sum line names)."""
        return self.plan_id + SUFFIX[self.kind]

    def of(self, kind: Kind) -> PlanKey:
        """The same plan's object of another kind."""
        return replace(self, kind=kind)


def inventory_prefix(inventory: str) -> str:
    """Every key of `inventory`'s plans (and its pointer) starts with this."""
    return f"{PLANS_PREFIX}{check_key_part(inventory, 'inventory name')}/"


def current_key(inventory: str) -> str:
    return inventory_prefix(inventory) + CURRENT


def plan_key(inventory: str, fingerprint: str, plan_id: str, kind: Kind = "plan", status: Status = "approved") -> str:
    """The key of one object of a plan; StoreError when a part is not a safe key segment."""
    return PlanKey(inventory, fingerprint, plan_id, kind, status).key


def _safe(*parts: str) -> bool:
    return all(name_problem(p) is None for p in parts)


def parse_key(key: str) -> PlanKey | None:
    """The typed value of a plan-store object key, or None when `key` is not one (the pointer, an inventory
    key, a stray object)."""
    parts = key.split("/")
    if len(parts) == 4:
        status: Status = "approved"
    elif len(parts) == 5 and parts[3] == REJECTED:
        status = "rejected"
    elif len(parts) == 5 and parts[3] == PENDING:
        status = "pending"
    else:
        return None
    if parts[0] != ROOT:
        return None
    leaf = parts[-1]
    for kind, suffix in SUFFIX.items():
        if leaf.endswith(suffix):
            plan_id = leaf[: -len(suffix)]
            if not _safe(parts[1], parts[2], plan_id):
                return None
            return PlanKey(parts[1], parts[2], plan_id, kind, status)
    return None


def pointer_of(key: str) -> str | None:
    """The inventory whose plan pointer `key` is (`plans/<inventory>/current.json`), or None."""
    parts = key.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == ROOT and parts[2] == CURRENT and _safe(parts[1]) else None


def inventory_of(key: str) -> str | None:
    """The inventory a key under plans/ belongs to (a plan object, a pointer or anything in its folder)."""
    parts = key.split("/")
    return parts[1] if len(parts) >= 3 and parts[0] == ROOT and _safe(parts[1]) else None


# -- the inventory store ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InventoryKey:
    """One inventory-store object: a stored version (`fingerprint` set) or the pointer (`fingerprint` None)."""

    name: str
    fingerprint: str | None


def inventory_key(name: str, fingerprint: str) -> str:
    return f"{INVENTORIES}/{check_key_part(name, 'inventory name')}/{check_key_part(fingerprint, 'fingerprint')}.yaml"


def current_inventory_key(name: str) -> str:
    return f"{INVENTORIES}/{check_key_part(name, 'inventory name')}/{CURRENT}"


def parse_inventory_key(key: str) -> InventoryKey | None:
    """The typed value of an inventory-store key, or None when `key` is not one."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != INVENTORIES or not _safe(parts[1]):
        return None
    if parts[2] == CURRENT:
        return InventoryKey(parts[1], None)
    fingerprint = parts[2].removesuffix(".yaml")
    if fingerprint == parts[2] or not _safe(fingerprint):
        return None
    return InventoryKey(parts[1], fingerprint)
