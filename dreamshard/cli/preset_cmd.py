"""`dreamshard inventory preset`: real-world inventories (Criteo Kaggle, Criteo Terabyte) from public cardinalities."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dreamshard.cli.inventory_cmd import said_written
from dreamshard.usecases import inventory as inventory_uc

#: The request's own defaults, shown by --help (the use case owns them).
_DEFAULTS = {k: f.default for k, f in inventory_uc.PresetRequest.model_fields.items()}


def preset_cmd(
    preset: Annotated[str, typer.Argument(help=f"One of: {', '.join(inventory_uc.preset_names())}.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Inventory file to write (.yaml/.yml or .json).")],
    dim: Annotated[
        int | None,
        typer.Option(
            "--dim",
            help="Embedding dim of every table, a multiple of 4 (default: 16 for criteo-kaggle, 128 for "
            "criteo-terabyte).",
        ),
    ] = None,
    pooling: Annotated[
        float, typer.Option("--pooling", help="Lookups per sample of every table (Criteo's features are one-hot: 1).")
    ] = _DEFAULTS["pooling"],
    zipf_exponent: Annotated[
        float, typer.Option("--zipf-exponent", help="Assumed Zipf exponent of row popularity (reuse histograms).")
    ] = _DEFAULTS["zipf_exponent"],
    name: Annotated[str | None, typer.Option("--name", help="Inventory name (default: the preset's).")] = None,
) -> None:
    """Write the 26 categorical tables of a Criteo dataset (public cardinalities; tables t_cat_0..t_cat_25)."""
    request = inventory_uc.PresetRequest(
        preset=preset, out=output, dim=dim, pooling=pooling, zipf_exponent=zipf_exponent, name=name
    )
    said_written(inventory_uc.preset(request).inventory, output)


def register(inventory_app: typer.Typer) -> None:
    """Add `preset` to the `inventory` command group."""
    inventory_app.command("preset")(preset_cmd)
