"""Checkers for chapter 00's exercises (the tour)."""
__all__ = ["CHECKS"]


def _positions(prompt_len, new_tokens, kv_cache):
    if kv_cache:
        return prompt_len + (new_tokens - 1)
    return sum(prompt_len + step for step in range(new_tokens))


def check_new_tokens_for_saving(new_tokens_for_saving) -> str:
    """00.1: smallest output length with the requested saving."""
    for prompt_len, factor in ((500, 10), (500, 2), (100, 50), (1, 1), (2000, 30), (64, 5)):
        want = next(n for n in range(1, 100_000)
                    if _positions(prompt_len, n, False) >= factor * _positions(prompt_len, n, True))
        got = new_tokens_for_saving(prompt_len, factor)
        assert got == want, (f"hint: new_tokens_for_saving({prompt_len}, {factor}) returned {got}, expected {want}; "
                             "compare positions_processed(..., kv_cache=False) with factor times the cached count")
    return "after a 500-token prompt the cache saves 10x from the 11th new token on"


def check_batch_for_weight_traffic(batch_for_weight_traffic) -> str:
    """00.2: batch size at which weight traffic per token drops below a bound."""
    for params, width, max_mb in ((7_000_000_000, 2, 100), (596_049_920, 2, 100), (1_000_000, 1, 1), (8e9, 2, 1000)):
        want = next(b for b in range(1, 1_000_000) if params * width / b / 1e6 < max_mb)
        got = batch_for_weight_traffic(params, width, max_mb)
        assert got == want, (f"hint: batch_for_weight_traffic({params}, {width}, {max_mb}) returned {got}, expected "
                             f"{want}; at exactly {max_mb} MB a token does not read *fewer* than {max_mb} MB")
    return "a 7B model needs a batch of 141 to read under 100 MB of weights per token"


def check_kv_bytes_per_token(kv_bytes_per_token) -> str:
    """00.3: KV bytes of one token across all layers."""
    for case in ((28, 8, 128, 2), (4, 2, 32, 4), (36, 8, 128, 2), (1, 1, 1, 1)):
        layers, kv_heads, head_dim, width = case
        want, got = 2 * layers * kv_heads * head_dim * width, kv_bytes_per_token(*case)
        assert got == want, (f"hint: kv_bytes_per_token{case} returned {got}, expected {want}; every layer keeps "
                             "a key and a value vector per KV head")
    return "Qwen3-0.6B: 114,688 bytes per token, so 10 GB holds 87,193 tokens"


CHECKS = {
    "00.1": check_new_tokens_for_saving,
    "00.2": check_batch_for_weight_traffic,
    "00.3": check_kv_bytes_per_token,
}
