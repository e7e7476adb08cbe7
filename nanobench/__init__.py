"""The benchmark harness, `python -m nanobench`: workloads, floor and results (chapter 15), the
command line, engine adapters and provenance (appendix A4), the online client (appendix A6)."""
