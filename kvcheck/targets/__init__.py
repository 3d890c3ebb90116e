"""Targets: turning a spec into a `kvcheck.core.target.Target` through the family that claims it
(`kvcheck.core.family.TargetLoader`), which probes it once; and reading a resolver from a source
file without importing its module (`kvcheck.targets.source`). See docs/architecture.md."""
