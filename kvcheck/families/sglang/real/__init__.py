"""SGLang's own allocation, release and retraction code under test (issue 21): the CPU
equivalents of its Triton kernels (`kernels`), the fakes its functions run over (`objects`), and
the allocation path that drives a release's functions (`path`)."""
