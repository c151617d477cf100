"""What the gate's decision does to the files: a released candidate's weights and card replace the shipped
model's (the card's provenance names the report committed beside it); a refused one leaves the shipped model's
directory byte-identical and its report beside the candidate."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from dreamshard.documents import atomic_write_text
from dreamshard.learning.model_store import CARD_FILE, COST_FILE, POLICY_FILE, load_card
from dreamshard.release.report import ReleaseReport, render

REPORT_MD, REPORT_JSON = "release.md", "release.json"


def write_report(directory: Path, report: ReleaseReport) -> Path:
    """The report's two files into `directory`; returns the Markdown one."""
    atomic_write_text(directory / REPORT_JSON, report.model_dump_json(indent=1) + "\n")
    return atomic_write_text(directory / REPORT_MD, render(report))


def promote(candidate: Path, target: Path, report: ReleaseReport) -> Path:
    """Replace the model in `target` by the one in `candidate` (weights first, the card last: a reader sees
    either model whole, by its card), with the report; returns the report's path."""
    card = load_card(candidate)
    provenance = {**card.provenance, "release": {"report": REPORT_MD, "summary": report.summary()}}
    released = card.model_copy(update={"provenance": provenance})
    target.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".release-", dir=target))
    try:
        names = [n for n in (COST_FILE, POLICY_FILE) if (candidate / n).is_file()]
        for name in names:
            shutil.copyfile(candidate / name, tmp / name)
        for name in names:
            os.replace(tmp / name, target / name)
        if POLICY_FILE not in names:
            (target / POLICY_FILE).unlink(missing_ok=True)
        path = write_report(target, report)
        atomic_write_text(target / CARD_FILE, released.model_dump_json(indent=2) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
