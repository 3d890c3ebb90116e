"""Counterexample files: the versioned file format, replay without Hypothesis, and regression
tests generated from a file. See docs/architecture.md."""
