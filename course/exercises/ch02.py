"""Checkers for chapter 02's exercises (the KV cache)."""
__all__ = ["CHECKS"]


def check_token_passes_without_cache(token_passes_without_cache) -> str:
    """02.1: closed form of the uncached generator's work."""
    for prompt_len in (1, 2, 32, 64, 500):
        for new_tokens in (0, 1, 2, 24, 100):
            want = sum(prompt_len + t for t in range(new_tokens))
            got = token_passes_without_cache(prompt_len, new_tokens)
            assert got == want, (f"hint: ({prompt_len}, {new_tokens}) gave {got}, expected {want}; step t runs "
                                 "prompt_len + t tokens, for t = 0 … new_tokens - 1")
    return "N·P + N(N-1)/2: quadratic in the output length"


def _copies(final_len, initial_rows):
    rows, copied = initial_rows, 0
    while rows < final_len:
        copied += rows  # the full buffer moves to one twice as large
        rows *= 2
    return copied


def check_rows_copied_by_doubling(rows_copied_by_doubling) -> str:
    """02.2: rows copied while a doubling buffer grows."""
    for final_len in (1, 16, 17, 100, 1000, 4096, 4097):
        for initial_rows in (1, 16, 256):
            want, got = _copies(final_len, initial_rows), rows_copied_by_doubling(final_len, initial_rows)
            assert got == want, (f"hint: ({final_len}, {initial_rows}) gave {got}, expected {want}; a buffer of "
                                 "r full rows is copied whole when token r + 1 arrives, and nothing is copied "
                                 "while the request still fits")
    return ("fewer than 2 rows per token amortised; during a copy both buffers exist, "
            "so the peak is 1.5x the new size, 3x the old one")


def check_concurrent_requests(concurrent_requests) -> str:
    """02.3: requests that fit into a KV budget."""
    gib = 2**30
    cases = [(40 * gib, 4096, 28, 8, 128, 2), (40 * gib, 4096, 28, 16, 128, 2), (10 * gib, 1000, 4, 2, 32, 4),
             (2**20, 4096, 28, 8, 128, 2)]
    for case in cases:
        budget, length, layers, kv_heads, head_dim, width = case
        want = budget // (2 * layers * kv_heads * head_dim * width * length)
        got = concurrent_requests(*case)
        assert got == want, (f"hint: concurrent_requests{case} gave {got}, expected {want}; per token and layer "
                             "the cache holds one K and one V vector per KV head, and a request that does not "
                             "fit whole does not count")
    return "91 requests with 8 KV heads, 45 with 16: GQA halves the KV and doubles the batch"


CHECKS = {
    "02.1": check_token_passes_without_cache,
    "02.2": check_rows_copied_by_doubling,
    "02.3": check_concurrent_requests,
}
