"""The terminal as a reviewer (dreamshard.usecases.review.Reviewer): a command run at a terminal that can answer
shows the question and takes the answer there, within publish.approval_timeout_s; without a terminal (a script, a
pipe, CI) nobody can answer, and a change that needs a reviewer waits, pending (`dreamshard plans approve`)."""

from __future__ import annotations

import getpass
import signal
import sys

import typer

from dreamshard.usecases.review import NoReviewer, Reviewer
from dreamshard.values.review import Review, ReviewQuestion


class _NoAnswer(Exception):
    """The reviewer at the terminal did not answer within the question's timeout."""


def _expire(signum: int, frame: object) -> None:
    raise _NoAnswer


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


class TerminalReviewer:
    """The question printed on stderr, the answer typed here (y/N and a comment) within its timeout; None when
    none came in time."""

    where = "the terminal"

    def ask(self, question: ReviewQuestion) -> Review | None:
        typer.echo(question.details, err=True)
        previous = signal.signal(signal.SIGALRM, _expire)
        signal.alarm(question.timeout_s)
        try:
            approve = typer.confirm(
                f"{question.headline}? (answer within {question.timeout_s} s)", default=False, err=True
            )
            comment = typer.prompt("Comment", default="", show_default=False, err=True)
        except (_NoAnswer, typer.Abort, EOFError):
            typer.echo(f"no answer within {question.timeout_s} s", err=True)
            return None
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        return Review(approve=approve, comment=comment, reviewer=_user(), via=self.where)


def terminal_reviewer() -> Reviewer:
    """The terminal when stdin and stderr are one (someone can read the question and answer), else `NoReviewer`."""
    if sys.stdin.isatty() and sys.stderr.isatty():
        return TerminalReviewer()
    return NoReviewer()
