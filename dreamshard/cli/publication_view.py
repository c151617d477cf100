"""How every publishing command shows what the publish use case did (`Publication`): one line per thing that
happened, the gate's reason, each moved table from -> to with its GiB and why; and its exit code. Rendering only."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console

from dreamshard.usecases.publication import Publication
from dreamshard.usecases.publish_explain import move_lines

#: Exit codes of the publishing commands: the plan is current (0), it is not (1), the change waits for a reviewer
#: (3). Errors (a plan or comparison that does not check out) are 2, as everywhere.
CURRENT, NOT_CURRENT, PENDING = 0, 1, 3


def exit_code(p: Publication) -> int:
    """0 when the judged plan (or the rollback's target) is current after the call, 3 when the change waits for a
    reviewer, else 1."""
    if p.status in ("pending", "already-pending"):
        return PENDING
    if p.status == "rolled-back" or p.judged_is_current:
        return CURRENT
    if p.status == "already-decided" and p.decision is not None and p.decision.approved:
        return CURRENT
    return NOT_CURRENT


def publication_json(p: Publication, extra: dict[str, Any] | None = None) -> str:
    """The publication as JSON: the diff against the plan that was current is there whether or not anything was
    published."""
    return json.dumps({**p.model_dump(mode="json"), **(extra or {})}, indent=2)


def _stored(ref: Any) -> str:
    return f"{ref.plan_id} -> {ref.key} (sha256 {ref.sha256[:16]}) in {ref.store}"


def show_publication(p: Publication) -> None:
    """What happened, on stdout when a plan became current (or waits), on stderr when not (module docstring)."""
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    d, ref = p.decision, p.ref
    if p.status == "published" and ref is not None:
        out.print(f"published {_stored(ref)}; now current", markup=False)
        out.print(d.reason if d is not None else p.reason, markup=False)
    elif p.status in ("rolled-back", "published", "fallback") and ref is None:  # an answer: nothing re-stored
        out.print(p.reason, markup=False)
    elif p.status in ("pending", "already-pending"):
        out.print(f"pending: {p.reason}", markup=False)
        if d is not None:
            out.print(f"gate: {d.shown}: {d.reason}", markup=False)
    elif p.status == "already-decided" and ref is not None and d is not None:
        line = (
            f"already decided: {d.outcome} {ref.plan_id} for this inventory version ({d.reason}); kept at {ref.key}, "
            f"nothing re-measured" + ("" if ref.is_current else "; it is not current now")
        )
        (out if d.approved else err).print(line, markup=False)
    elif ref is not None and d is not None:
        verb = d.outcome if d.outcome in ("equivalent", "inconclusive") else "rejected"
        stays = "; the current plan stays" if p.status == "kept" and verb != "rejected" else ""
        err.print(f"{verb} {ref.plan_id}: {d.reason}{stays} (kept at {ref.key})", markup=False)
    else:
        err.print(p.reason, markup=False)
    if p.status == "fallback" and p.fallback_ref is not None:
        out.print(f"fallback: published {_stored(p.fallback_ref)}; now current", markup=False)
        out.print(p.fallback_ref.reason, markup=False)
    if p.status == "declined":
        err.print(p.reason, markup=False)
    if d is not None and d.world:  # the world the gate charged (a PROXY world is in its reason)
        out.print(f"charged in {d.world}", markup=False)
    show_moves(p, out)


def show_moves(p: Publication, out: Console) -> None:
    """Each table the judged plan moves from the plan that was current, and why."""
    if p.diff is None:
        return
    out.print(f"against the plan that was current: {p.diff.summary}", markup=False)
    for line in move_lines(p.diff):
        out.print(f"  {line}", markup=False)
    if p.moves_why:
        out.print(f"  why: {p.moves_why}", markup=False)


def finish(p: Publication) -> None:
    """End the command with the publication's exit code."""
    code = exit_code(p)
    if code:
        raise typer.Exit(code)
