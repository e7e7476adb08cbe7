"""Solutions to chapter 02's exercises, typical mistakes the checkers reject, and written answers."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def token_passes_without_cache(prompt_len, new_tokens):
    """Sum of prompt_len + t for t < new_tokens."""
    return new_tokens * prompt_len + new_tokens * (new_tokens - 1) // 2


def token_passes_without_cache_wrong(prompt_len, new_tokens):
    """Counts the step that would follow the last token too."""
    return new_tokens * prompt_len + new_tokens * (new_tokens + 1) // 2


def rows_copied_by_doubling(final_len, initial_rows):
    """Every doubling copies the whole (full) old buffer."""
    rows, copied = initial_rows, 0
    while rows < final_len:
        copied += rows
        rows *= 2
    return copied


def rows_copied_by_doubling_wrong(final_len, initial_rows):
    """Counts the new buffer's size instead of the rows actually moved."""
    rows, copied = initial_rows, 0
    while rows < final_len:
        rows *= 2
        copied += rows
    return copied


def concurrent_requests(kv_budget_bytes, request_len, layers, kv_heads, head_dim, bytes_per_value):
    """Whole requests that fit: K and V per KV head, per layer, per token."""
    return kv_budget_bytes // (2 * layers * kv_heads * head_dim * bytes_per_value * request_len)


def concurrent_requests_wrong(kv_budget_bytes, request_len, layers, kv_heads, head_dim, bytes_per_value):
    """Forgets that the cache holds both K and V."""
    return kv_budget_bytes // (layers * kv_heads * head_dim * bytes_per_value * request_len)


SOLUTIONS = {"02.1": token_passes_without_cache, "02.2": rows_copied_by_doubling, "02.3": concurrent_requests}
WRONG = {"02.1": token_passes_without_cache_wrong, "02.2": rows_copied_by_doubling_wrong,
         "02.3": concurrent_requests_wrong}

EXPLANATIONS = {
    "02.4": (
        "Reuse the timing cell with prompt_len = 256 and new_tokens in (4, 16, 64). The work ratio is "
        "(N·P + N(N-1)/2) / (P + N - 1): for a long prompt it is close to N, because every uncached step "
        "repeats the whole prompt while a cached step adds one token. So the speed-up grows with N. It is "
        "limited by the fixed cost of a step (Python, launching every layer's operations, reading the "
        "weights), which the cached generator pays N times for very little work each time: once the "
        "uncached steps are long enough to hide their own fixed cost, the time ratio trails the work "
        "ratio by roughly (fixed cost + one token of work) per cached step."
    ),
    "02.5": (
        "Memory: the buffer is [B, max_len, ...] for every request, so the short request reserves as much "
        "as the longest one, the waste of this chapter multiplied by B, and a new request cannot join "
        "until a whole row of the buffer is free. Masking: the requests are at different positions, so "
        "their new tokens sit at different columns. Left-padding the short one makes its real tokens "
        "start later: attention must mask the padding keys (or they take softmax weight) and the "
        "rotary positions must count from its first real token, not from column 0; right-padding "
        "instead puts each step's new token at a different column per request, so the write is a "
        "scatter and the causal mask differs per row. Both are exactly the bookkeeping that the "
        "block table and the per-sequence context length of chapter 03 make explicit."
    ),
}
