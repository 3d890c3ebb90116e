"""The judging core: scenarios as data, the reference model, SGLang's objects as strict fakes,
the engine that replays a scenario around a resolver, and the invariant checkers that compare
the two after every event (`kvcheck.core.run`). Nothing here knows how a target is found or how
scenarios are generated. See docs/architecture.md."""
