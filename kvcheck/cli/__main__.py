"""`python -m kvcheck.cli` runs the command line."""

from kvcheck.cli.main import console

console()
