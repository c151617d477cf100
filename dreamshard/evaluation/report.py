"""Writing a comparison's outputs: everything is rendered in memory first, then written, so a failure while
rendering leaves no file behind and every file that is written is complete (atomic rename)."""

from __future__ import annotations

import json
from pathlib import Path

from dreamshard.documents import atomic_write_bytes
from dreamshard.evaluation.compare import Comparison
from dreamshard.evaluation.render import comparison_markdown, plot_comparison_png


def plot_rows(cmp: Comparison) -> list[dict[str, float | str]]:
    """Rows {sharder, overall_ms, ratio_to_best} for `dvc plots`."""
    return [
        {"sharder": cmp.label(r), "overall_ms": r.overall_ms, "ratio_to_best": r.ratio_to_best} for r in cmp.results
    ]


def write_comparison_outputs(
    cmp: Comparison,
    *,
    json_path: Path | None = None,
    markdown_path: Path | None = None,
    plot_path: Path | None = None,
    plans_dir: Path | None = None,
    summary_path: Path | None = None,
    plot_data_path: Path | None = None,
) -> list[Path]:
    """Write the requested outputs of a comparison; returns the paths written."""
    files: dict[Path, bytes] = {}
    if json_path is not None:
        files[json_path] = (cmp.model_dump_json(indent=2) + "\n").encode()
    if markdown_path is not None:
        files[markdown_path] = (comparison_markdown(cmp) + "\n").encode()
    if plot_path is not None:
        files[plot_path] = plot_comparison_png(cmp)
    if summary_path is not None:
        files[summary_path] = (json.dumps(cmp.summary(), indent=2) + "\n").encode()
    if plot_data_path is not None:
        files[plot_data_path] = (json.dumps(plot_rows(cmp), indent=2) + "\n").encode()
    if plans_dir is not None:
        for r in cmp.results:
            files[plans_dir / f"{cmp.label(r)}.json"] = (r.plan.model_dump_json(indent=2) + "\n").encode()
    for path, data in files.items():
        atomic_write_bytes(path, data)
    return list(files)
