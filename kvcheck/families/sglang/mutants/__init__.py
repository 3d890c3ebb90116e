"""SGLang's mutant corpus: plausible buggy resolvers kvcheck must catch, and correct rewrites it
must pass, per API generation."""
