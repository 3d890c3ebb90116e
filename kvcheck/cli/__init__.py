"""The `kvcheck` command line: one module per command, shared options in `kvcheck.cli.options`.

`kvcheck.cli:main` is the console entry point and stays importable under that name."""

from kvcheck.cli.main import main

__all__ = ["main"]
