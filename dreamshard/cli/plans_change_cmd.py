"""`dreamshard plans rollback | approve | decline`: the plans commands that change what is current, each through the
one publish use case (dreamshard.usecases.publish): a rollback asks the team's reviewer like a publish does
(publish.require_human), and approve / decline answer a change kept waiting for one."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dreamshard.cli.plans_common import EndpointOpt, InventoryNameOpt, ParamsOpt, StoreOpt, plans_settings
from dreamshard.cli.publication_view import finish, publication_json, show_publication
from dreamshard.cli.review import terminal_reviewer
from dreamshard.lazy import lazy_module

# the use case imports torch: it loads when the command runs (dreamshard/lazy.py)
if TYPE_CHECKING:  # pragma: no cover
    from dreamshard.usecases import publish as publish_uc
else:
    publish_uc = lazy_module("dreamshard.usecases.publish")

PlanIdArg = Annotated[str, typer.Argument(help="The plan id the change waits for (`plans list`: status pending).")]
CommentOpt = Annotated[str, typer.Option("--comment", help="Recorded with the answer.")]
ReviewerOpt = Annotated[
    str | None, typer.Option("--reviewer", help="Who answers (recorded; default: this login name).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print what happened as JSON.")]
AnyInventoryOpt = Annotated[
    str | None, typer.Option("--inventory", help="Inventory of the plan (default: whichever holds it).")
]


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def _show(done: publish_uc.Publication, as_json: bool) -> None:
    if as_json:
        typer.echo(publication_json(done))
    else:
        show_publication(done)
    finish(done)


def rollback_cmd(
    inventory: InventoryNameOpt,
    store: StoreOpt = None,
    to: Annotated[
        str | None, typer.Option("--to", help="Approved plan id to make current (default: previous).")
    ] = None,
    params: ParamsOpt = None,
    endpoint: EndpointOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move `current` back to the previous version (or to --to PLAN_ID, which also repairs a corrupt pointer). No
    version is deleted. With publish.require_human a reviewer answers first (at this terminal); with none to answer
    the rollback waits (exit 3; `dreamshard plans approve PLAN_ID`)."""
    request = publish_uc.RollbackRequest(
        settings=plans_settings(params), store=store, endpoint_url=endpoint, inventory=inventory, to=to
    )
    _show(publish_uc.rollback(request, terminal_reviewer()), as_json)


def _answer(
    plan_id: str,
    approve: bool,
    inventory: str | None,
    comment: str,
    reviewer: str | None,
    params: Path | None,
    store: str | None,
    endpoint: str | None,
) -> publish_uc.Publication:
    request = publish_uc.AnswerRequest(
        settings=plans_settings(params),
        store=store,
        endpoint_url=endpoint,
        plan_id=plan_id,
        inventory=inventory,
        approve=approve,
        comment=comment,
        reviewer=reviewer if reviewer is not None else _login(),
    )
    return publish_uc.answer(request, via=f"plans {'approve' if approve else 'decline'}")


def _answer_command(approve: bool, doc: str) -> Callable[..., None]:
    """`plans approve` or `plans decline`: the same options, the answer they give."""

    def command(
        plan_id: PlanIdArg,
        inventory: AnyInventoryOpt = None,
        comment: CommentOpt = "",
        reviewer: ReviewerOpt = None,
        store: StoreOpt = None,
        params: ParamsOpt = None,
        endpoint: EndpointOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        _show(_answer(plan_id, approve, inventory, comment, reviewer, params, store, endpoint), as_json)

    command.__doc__ = doc
    return command


approve_cmd = _answer_command(
    True,
    """Answer yes to a change kept waiting for a reviewer (publish.require_human): the plan becomes current (or the
    rollback is made), recorded with who answered, if the current plan is still the one it was decided against.""",
)
decline_cmd = _answer_command(
    False,
    """Answer no to a change kept waiting for a reviewer: nothing current changes; the plan is kept as rejected with
    the answer.""",
)


def register(plans_app: typer.Typer) -> None:
    """Add rollback, approve and decline to `plans`."""
    plans_app.command("rollback")(rollback_cmd)
    plans_app.command("approve")(approve_cmd)
    plans_app.command("decline")(decline_cmd)
