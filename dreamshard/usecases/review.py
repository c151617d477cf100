"""The reviewer port (docs/architecture/gate.md, "Reviewers"): who answers before a plan becomes current when the
team's policy wants a human (publish.require_human). Beside the `Runner` (dreamshard.usecases.runner): the
publish use case asks a `Reviewer` and does not know who it is.

* the Prefect UI's pause (flows/review.py), for the flows;
* the terminal (dreamshard/cli/review.py), for a command run at a terminal that can answer;
* `NoReviewer`: nobody can answer (a script, a scheduled run without a UI); the change is kept pending, and
  `dreamshard plans approve PLAN_ID` answers it later.

`None` from `ask` means nobody answered (no reviewer reachable, or none within publish.approval_timeout_s): the
change is kept pending, never made current unreviewed and never lost.
"""

from __future__ import annotations

from typing import Protocol

from dreamshard.values.review import Review, ReviewQuestion


class Reviewer(Protocol):
    """Answers a `ReviewQuestion` (module docstring)."""

    #: Where answers come from, for messages ("the Prefect UI", "the terminal", "nobody").
    where: str

    def ask(self, question: ReviewQuestion) -> Review | None:
        """The answer to `question`, or None when nobody answered within `question.timeout_s`."""
        ...


class NoReviewer:
    """Nobody can answer: every change that needs a reviewer is kept pending (`plans approve` answers it)."""

    where = "nobody (no reviewer can be reached from here)"

    def ask(self, question: ReviewQuestion) -> Review | None:
        return None


class ScriptedReviewer:
    """Answers from a list, in order (tests, and a door whose reviewer answered before the use case ran): each
    question asked is kept in `asked`; past the list, nobody answers."""

    where = "a scripted reviewer"

    def __init__(self, answers: list[Review | None] | None = None) -> None:
        self.answers = list(answers or [])
        self.asked: list[ReviewQuestion] = []

    def ask(self, question: ReviewQuestion) -> Review | None:
        self.asked.append(question)
        return self.answers.pop(0) if self.answers else None
