"""Finding counterexamples: Hypothesis strategies and profiles, the property search with its
domain shrinker, and the bounded exhaustive search. See docs/architecture.md."""

from typing import Final

# The search budget of `kvcheck check`, `kvcheck.check()` and the pytest plugin when none is given.
# Defined here, not in `kvcheck.search.check`, so the command line can show it without importing
# Hypothesis.
DEFAULT_MAX_EXAMPLES: Final = 300
