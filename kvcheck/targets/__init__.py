"""Targets: turning a spec (`builtin:NAME`, `module:Qualname`, `file.py::Qualname`) into a
`kvcheck.core.target.Target` that carries its probed API shape. See docs/architecture.md."""
