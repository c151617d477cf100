"""The reviewer of the flows (dreamshard.usecases.review.Reviewer): the Prefect UI's pause with an approval form
(docs/architecture/gate.md, "Reviewers"). Before it pauses, the question is logged and kept as the markdown
artifact `review-<inventory>`, so the paused run's page shows what is asked, not only "Pausing flow"."""

from __future__ import annotations

from dreamshard_flows.artifacts import review_artifact
from prefect import get_run_logger
from prefect.exceptions import FlowPauseTimeout
from prefect.input import RunInput
from pydantic import Field

from dreamshard.values.review import Review, ReviewQuestion


class ApprovalInput(RunInput):
    """What a reviewer answers in the Prefect UI when publish.require_human is true."""

    approve: bool = Field(
        default=False, description="Make the plan current (the question is the run's review artifact)"
    )
    comment: str = Field(default="", max_length=2000)
    reviewer: str = Field(default="", max_length=200, description="Who answers (recorded with the decision)")


class PrefectReviewer:
    """The Prefect UI answers: the running flow run pauses with the approval form (`ApprovalInput`) until a reviewer
    resumes it or publish.approval_timeout_s passes (then None: the change waits, pending)."""

    where = "the Prefect UI"

    def ask(self, question: ReviewQuestion) -> Review | None:
        from prefect.flow_runs import pause_flow_run  # looked up per call: tests replace it

        log = get_run_logger()
        log.info("review: %s", question.headline)
        log.info("%s", question.details)
        review_artifact(question)
        asked = ApprovalInput.with_initial_data(description=question.details)
        try:
            answer: ApprovalInput = pause_flow_run(wait_for_input=asked, timeout=question.timeout_s, poll_interval=2)
        except FlowPauseTimeout:
            log.info(
                "no reviewer answered within %d s: the change waits (plans approve %s)",
                question.timeout_s,
                question.plan_id,
            )
            return None
        return Review(approve=answer.approve, comment=answer.comment, reviewer=answer.reviewer, via=self.where)
