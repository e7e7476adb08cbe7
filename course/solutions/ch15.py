"""Solutions to chapter 15's exercises (benchmarking)."""
from nanobench.floor import H200_DATASHEET, model_cost, step_bound

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def padding_fraction(requests, batch_size):
    """Fraction of static-batch decode slots that are padding."""
    useful = slots = 0
    for i in range(0, len(requests), batch_size):
        chunk = requests[i:i + batch_size]
        useful += sum(r.max_tokens for r in chunk)
        slots += len(chunk) * max(r.max_tokens for r in chunk)
    return 1 - useful / slots


def padding_fraction_full_chunks(requests, batch_size):
    """A typical mistake: every chunk counted as full, the short last one included."""
    useful = slots = 0
    for i in range(0, len(requests), batch_size):
        chunk = requests[i:i + batch_size]
        useful += sum(r.max_tokens for r in chunk)
        slots += batch_size * max(r.max_tokens for r in chunk)
    return 1 - useful / slots


def prefill_bound(num_prompts, prompt_len):
    """"memory" or "compute" for one prefill step of Qwen3-0.6B on the H200 datasheet."""
    from nanoserve.model.tiny import QWEN3_0_6B_CONFIG

    tokens = num_prompts * prompt_len
    pairs = num_prompts * prompt_len * (prompt_len + 1) // 2
    return step_bound(model_cost(QWEN3_0_6B_CONFIG), tokens, tokens, pairs,
                      H200_DATASHEET["memory_bandwidth_bytes_s"], H200_DATASHEET["bf16_dense_flops_s"])


def prefill_bound_weights_per_prompt(num_prompts, prompt_len):
    """A typical mistake: the weights read once per prompt instead of once per step."""
    from nanoserve.model.tiny import QWEN3_0_6B_CONFIG

    cost = model_cost(QWEN3_0_6B_CONFIG)
    bw, flops = H200_DATASHEET["memory_bandwidth_bytes_s"], H200_DATASHEET["bf16_dense_flops_s"]
    tokens = num_prompts * prompt_len
    moved = num_prompts * cost.weight_bytes + cost.kv_bytes_per_token * tokens
    work = cost.matmul_flops_per_token * tokens + cost.attn_flops_per_pair * num_prompts * prompt_len * (prompt_len + 1) // 2
    return "memory" if moved / bw >= work / flops else "compute"


SOLUTIONS = {"15.1": padding_fraction, "15.2": prefill_bound}
WRONG = {"15.1": padding_fraction_full_chunks, "15.2": prefill_bound_weights_per_prompt}
EXPLANATIONS = {
    "15.3": ("Each run gives one tok/s value; their spread (max - min, or the standard deviation s) is the noise. "
             "To tell a difference d between two engines' means apart from noise you want the standard error "
             "s * sqrt(2 / n) well below d, say d > 3 s sqrt(2/n), so n > 18 (s/d)^2. With runs spreading by 1-2% "
             "on one GPU, a 5% difference needs only two or three runs per engine; a spread of 5% (a busy or "
             "throttling GPU, or runs from different sessions) needs about 18. Back-to-back sessions on the same "
             "machine keep s small, which is why ratios are only taken within one session."),
    "15.4": ("In StepTimer's timed_step, read the engine's counters (LLMEngine.stats: prefill_tokens, "
             "decode_tokens) before and after the original step() and append the two differences next to the "
             "duration. A scatter of duration against tokens processed shows a line that does not go through "
             "zero: its intercept, a few milliseconds for eager steps and much less for CUDA-graph steps, is the "
             "fixed per-step overhead (launches, host bookkeeping, synchronisation), and it dominates decode steps "
             "of small batches, while prefill steps sit on the slope (compute per token)."),
    "15.5": ("Run the same command twice, once with --enforce-eager, and compare startup.startup_s. For nanoserve "
             "the difference is the CUDA-graph capture (the decode, mixed-step and cascade graphs of chapters 09, 12 and 13): "
             "typically most of its few seconds of start-up. For vLLM, eager mode skips both torch.compile and "
             "graph capture: the chapter's vLLM started in 40-90 s with graphs and the GPU kit notes about 9 s "
             "with enforce_eager, so compilation and capture are around 80-90% of its start-up (less with a warm "
             "compile cache)."),
}
