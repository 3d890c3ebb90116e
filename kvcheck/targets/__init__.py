"""Targets: turning a spec (`builtin:NAME`, `module:Qualname`, `file.py::Qualname`) into a
`kvcheck.families.sglang.target.Target` that carries its probed API shape. See
docs/architecture.md."""
