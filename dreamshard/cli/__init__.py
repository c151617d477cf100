"""Command-line interface (typer). Each area registers its commands from its own module."""
