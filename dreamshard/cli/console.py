"""How the CLI's output stays readable where it is read: a table printed to a pipe or a log keeps its natural
width (nothing wrapped, nothing cut), one printed to a terminal narrower than the table wraps its cells instead
of cutting numbers to "1.6…"; `--help` uses rich panels only on a terminal wide enough for them, plain wrapped
text otherwise."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable

from rich.console import Console, RenderableType
from rich.table import Table as RichTable
from typer._click.core import Command

#: The width a table is measured in when nothing bounds it (a pipe, a log).
UNBOUNDED = 10_000
#: The narrowest terminal the rich help panels are used on: narrower, a long option key would be cut.
RICH_HELP_COLUMNS = 100


def wrapping(table: RichTable) -> RichTable:
    """`table` with every column wrapping what does not fit (folding a long number) instead of cutting it."""
    for column in table.columns:
        column.overflow = "fold"
        column.no_wrap = False
    return table


def _tables(item: RenderableType) -> Iterable[RichTable]:
    if isinstance(item, RichTable):
        yield item
    for child in getattr(item, "renderables", ()):  # a rich Group
        yield from _tables(child)


def show(console: Console, *items: RenderableType) -> None:
    """Print rich renderables (tables, groups, text) on `console`: at their natural width when the console is not
    a terminal, else at the terminal's width with every table wrapping its cells."""
    for item in items:
        for table in _tables(item):
            wrapping(table)
        if console.is_terminal:
            console.print(item)
            continue
        width = console.width
        console.width = max(width, console.measure(item, options=console.options.update_width(UNBOUNDED)).maximum)
        try:
            console.print(item)
        finally:
            console.width = width


def rich_help_fits(stream: object = None) -> bool:
    """Whether `--help` is shown as rich panels: on a terminal at least RICH_HELP_COLUMNS wide."""
    out = stream if stream is not None else sys.stdout
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty()) and shutil.get_terminal_size().columns >= RICH_HELP_COLUMNS


def set_help_style(command: Command, rich: bool) -> None:
    """Rich help panels (`rich`) or plain help text, wrapped at the width, for `command` and every subcommand."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = "rich" if rich else None
    for sub in getattr(command, "commands", {}).values():  # a group's subcommands
        set_help_style(sub, rich)
