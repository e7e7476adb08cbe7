"""Solutions to chapter 00's exercises, typical mistakes the checkers reject, and written answers."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def _positions(prompt_len, new_tokens, kv_cache):
    """Chapter 00's positions_processed."""
    if kv_cache:
        return prompt_len + (new_tokens - 1)
    return sum(prompt_len + step for step in range(new_tokens))


def new_tokens_for_saving(prompt_len, factor):
    """Try output lengths in turn until the uncached work is `factor` times the cached work."""
    n = 1
    while _positions(prompt_len, n, False) < factor * _positions(prompt_len, n, True):
        n += 1
    return n


def new_tokens_for_saving_wrong(prompt_len, factor):
    """Forgets the prefill: counts only one position per cached step."""
    n = 1
    while _positions(prompt_len, n, False) < factor * n:
        n += 1
    return n


def batch_for_weight_traffic(num_params, bytes_per_param, max_mb):
    """Smallest batch with strictly fewer than max_mb MB of weights per token."""
    return int(num_params * bytes_per_param // (max_mb * 1e6)) + 1


def batch_for_weight_traffic_wrong(num_params, bytes_per_param, max_mb):
    """Stops at 'at most' instead of 'fewer than'."""
    return -int(-num_params * bytes_per_param // (max_mb * 1e6))


def kv_bytes_per_token(layers, kv_heads, head_dim, bytes_per_value):
    """One K and one V vector per KV head, in every layer."""
    return 2 * layers * kv_heads * head_dim * bytes_per_value


def kv_bytes_per_token_wrong(layers, kv_heads, head_dim, bytes_per_value):
    """Counts the keys only."""
    return layers * kv_heads * head_dim * bytes_per_value


SOLUTIONS = {"00.1": new_tokens_for_saving, "00.2": batch_for_weight_traffic, "00.3": kv_bytes_per_token}
WRONG = {"00.1": new_tokens_for_saving_wrong, "00.2": batch_for_weight_traffic_wrong,
         "00.3": kv_bytes_per_token_wrong}

EXPLANATIONS = {
    "00.4": (
        "It is the same, and it must be: a request's output may depend only on its own prompt and sampling "
        "parameters, never on which strangers share its batch, or the same question would get different "
        "answers under different load. Every operation in the engine treats rows independently (attention "
        "is per sequence through its own block table, greedy sampling is an argmax per row), and on a CPU "
        "in float32 the arithmetic for one row does not change with the batch. On a GPU it can: matrix "
        "multiplication kernels pick different tilings and reduction orders for different batch sizes, so "
        "a logit can differ in its last bits, and where two tokens are nearly tied the argmax can flip. "
        "Most engines accept this by default; strict batch invariance needs kernels whose reduction order "
        "does not depend on the batch."
    ),
}
