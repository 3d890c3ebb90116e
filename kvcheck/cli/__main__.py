"""`python -m kvcheck.cli` runs the command line."""

from kvcheck.cli import console

console()
