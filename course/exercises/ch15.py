"""Checkers for chapter 15's exercises (benchmarking)."""
from nanobench.floor import H200_DATASHEET, model_cost, step_bound
from nanobench.workloads import make_workload

from course.solutions.ch15 import padding_fraction as _reference_padding  # the reference answer

__all__ = ["CHECKS"]


def check_padding_fraction(padding_fraction) -> str:
    """11.1: the share of static-batch decode slots that produce nothing."""
    small = make_workload("random", num_requests=24, output_len=(1, 50), seed=3)
    for requests in (small, make_workload("random")):
        for batch_size in (1, 5, 16, 256):
            want = _reference_padding(requests, batch_size)
            got = padding_fraction(requests, batch_size)
            assert isinstance(got, float) and 0.0 <= got < 1.0, f"hint: return a fraction in [0, 1), got {got!r}"
            assert abs(got - want) < 1e-9, (
                f"hint: batch {batch_size}: got {got:.4f}, expected {want:.4f}; chunks are consecutive requests, "
                "every row of a chunk steps as long as the chunk's longest max_tokens, and the last chunk may be short")
    return "a batch of one wastes nothing; a batch of 256 wastes almost half of its decode slots"


def _reference_bound(num_prompts, prompt_len) -> str:
    """Roofline side of one prefill step of Qwen3-0.6B at datasheet rates."""
    from nanoserve.model.tiny import QWEN3_0_6B_CONFIG

    tokens = num_prompts * prompt_len
    pairs = num_prompts * prompt_len * (prompt_len + 1) // 2
    return step_bound(model_cost(QWEN3_0_6B_CONFIG), tokens, tokens, pairs,
                      H200_DATASHEET["memory_bandwidth_bytes_s"], H200_DATASHEET["bf16_dense_flops_s"])


def check_prefill_bound(prefill_bound) -> str:
    """11.2: which side of the roofline a prefill step is on."""
    for num_prompts, prompt_len in ((1, 1), (1, 16), (1, 200), (1, 600), (1, 3000), (4, 100), (8, 60), (128, 2500)):
        want, got = _reference_bound(num_prompts, prompt_len), prefill_bound(num_prompts, prompt_len)
        assert got in ("memory", "compute"), f"hint: return 'memory' or 'compute', got {got!r}"
        assert got == want, (f"hint: {num_prompts} prompt(s) of {prompt_len} tokens is {want}-bound, you said {got}; "
                             "one step reads the weights once however many prompts it carries; count the new tokens' "
                             "matmul FLOPs and the causal attention pairs n(n+1)/2 per prompt, then compare "
                             "bytes/bandwidth with FLOPs/rate (step_bound does exactly that)")
    return "a few hundred tokens in one step are enough to make the weights' arithmetic the bottleneck"


CHECKS = {"15.1": check_padding_fraction, "15.2": check_prefill_bound}
