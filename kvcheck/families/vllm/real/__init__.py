"""A vLLM release's own scheduler code as the target (work in progress, see docs/vllm-real.md).

`compiled.compile_release(package)` compiles the release's scheduler from its files;
`adapter.ReleaseScheduler` drives it behind the family's seam. The target loader (`claims`,
`load` for `vllm==V`, a checkout, `file.py::Qualname`) is not written yet: until it is, this
package claims no spec.
"""
