"""kvcheck's version, in a module of its own so that any layer can name it without importing
the package's public API."""

VERSION = "0.1.0"
