"""Composition roots: the `director` command, `director ctl`, and the runtime of `director
run` (the only place that picks the kernel or the fake and starts threads)."""
