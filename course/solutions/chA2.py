"""Written answers to appendix A2's exercises (engine assembly)."""

__all__ = ["EXPLANATIONS"]

EXPLANATIONS = {
    "A2.1": (
        "max_num_seqs=12: decode with buckets [8, 12] (graph_buckets(12, smallest=8)), then mixed with the\n"
        "14 buckets from 16 to 8192 tokens (they follow max_num_batched_tokens, not max_num_seqs).\n"
        "max_num_seqs=16: cascade [16] first, then decode [8, 16], then the same mixed buckets.\n"
        "The cascade is added only when the largest decode bucket reaches CASCADE_MIN_LANES (16),\n"
        "chapter 13's smallest cascade bucket: with max_num_seqs=12 it would have no bucket to capture,\n"
        "and CascadeDecode refuses a bucket list without one."),
    "A2.2": (
        "(a) AsyncEngineCore: async_scheduling=True is honoured on a CPU too (resolve only turns it on\n"
        "by default on CUDA). (b) OverlappedSpecDecodeCore, chapter 18's section 9 core; without\n"
        "async_scheduling it is SpecDecodeCore. (c) ValueError: the tensor-parallel executor has no\n"
        "verify step. make_engine_core evaluates core_class(config) before its arguments, so the\n"
        "refusal comes before build_executor: no worker starts and no weight loads."),
}
