"""The `dreamshard` console script: one typer app, commands registered per area, one-line errors."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
from importlib.metadata import entry_points

import typer
from pydantic import ValidationError
from rich.console import Console
from typer._click import exceptions as tclick
from typer._click.core import Command

from dreamshard.cli import (
    compare_cmd,
    explain_cmd,
    inventory_cmd,
    learn_cmd,
    plan_cmd,
    plans_cmd,
    preset_cmd,
    profile_cmd,
    release_cmd,
    remote_cmd,
    replan_cmd,
    torchrec_cmd,
)
from dreamshard.cli.console import rich_help_fits, set_help_style
from dreamshard.cli.flags import with_flags
from dreamshard.errors import DreamshardError, redact_urls
from dreamshard.usecases.base import describe_validation_error

app = typer.Typer(
    name="dreamshard",
    help="Learned embedding-table sharding: inventories, profiling, sharders, training, plans.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


for _module in (
    inventory_cmd,
    profile_cmd,
    plan_cmd,
    compare_cmd,
    learn_cmd,
    release_cmd,
    plans_cmd,
    remote_cmd,
    replan_cmd,
    torchrec_cmd,
    explain_cmd,
):
    _module.register(app)
preset_cmd.register(inventory_cmd.inventory_app)
#: Entry point group of command groups that live outside the library (the pipeline, with the Prefect flows).
PLUGIN_GROUP = "dreamshard.cli"
_plugins_loaded: list[str] = []


def register_plugins(argv: list[str]) -> None:
    """Add the commands of the `dreamshard.cli` entry points (`dreamshard pipeline ...`). Called by main(), not
    at import: importing this module never loads Prefect or the flows package. A plugin is loaded only when its
    command is asked for (or for the top-level help): Prefect's import is 2.6 s of every other command's start,
    and each DVC stage is one. A plugin whose dependencies are missing is skipped, and said so only when its
    command is asked for."""
    command = argv[0] if argv else None
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.name in _plugins_loaded or not (command is None or command == ep.name or command.startswith("-")):
            continue
        _plugins_loaded.append(ep.name)
        try:
            register = ep.load()
        except ImportError as e:
            if command == ep.name:
                raise PluginMissing(
                    f"'dreamshard {ep.name}' needs {e.name or 'a missing package'}: "
                    f"install dreamshard with its flows (pip install -e '.[dev]')"
                ) from None
            continue
        register(app)


@functools.cache
def click_app(plugins: tuple[str, ...]) -> Command:
    """The click command typer builds from `app` with these plugins registered, built once per process: typer
    rebuilds it on every call (signatures and type hints of all 31 commands, about 0.1 s), which an in-process
    caller such as `invoke` would otherwise pay per command."""
    del plugins  # the cache key: registering a plugin adds commands to `app`
    return typer.main.get_command(app)


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr (URL credentials redacted) and exit with `code`."""
    err_console.print(f"error: {redact_urls(message)}", markup=False)
    raise SystemExit(code)


class PluginMissing(DreamshardError):
    """A command group from an entry point whose dependencies are not installed."""


#: Telemetry off everywhere (these machines are offline; users opt in explicitly by setting them).
TELEMETRY_OFF = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1", "DVC_NO_ANALYTICS": "1"}


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; typed errors become one line on stderr and exit code 2."""
    for key, value in TELEMETRY_OFF.items():
        os.environ.setdefault(key, value)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        register_plugins(args)
        command = click_app(tuple(_plugins_loaded))
        set_help_style(command, rich_help_fits())
        rc = command(args=argv, standalone_mode=False)
        if isinstance(rc, int) and not isinstance(rc, bool) and rc != 0:
            sys.exit(rc)  # typer.Exit(code) comes back as a return value when standalone_mode=False
    except DreamshardError as e:
        fail(f"{type(e).__name__}: {with_flags(str(e))}", e.exit_code)
    except ValidationError as e:
        fail(f"InvalidInput: {describe_validation_error(e)}")
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Exception as e:  # click usage errors and friends
        if isinstance(e, typer.Exit):
            raise SystemExit(e.exit_code) from None
        if isinstance(e, typer.Abort):
            fail("aborted", 130)
        if isinstance(e, tclick.NoArgsIsHelpError):  # typer >= 0.16 raises its vendored click's exceptions
            e.show()  # the group's help, as click does in standalone mode
            raise SystemExit(2) from None
        if isinstance(e, tclick.ClickException):
            fail(f"UsageError: {e.format_message()}", 2)
        raise
    sys.exit(0)


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI in-process with `argv`: (exit code, stdout, stderr). For tests and scripts that drive many
    commands without a subprocess each."""
    out, err = io.StringIO(), io.StringIO()
    code: str | int | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code
    return 1 if isinstance(code, str) else int(code or 0), out.getvalue(), err.getvalue()


if __name__ == "__main__":
    main()
