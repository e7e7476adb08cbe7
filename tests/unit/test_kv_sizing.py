"""KV-cache sizing on CUDA: gpu_memory_utilization is this engine's share, as in vLLM."""
import pytest

from nanoserve.engine.config import gpu_kv_cache_bytes

GiB = 2**30


def test_one_engine_gets_its_share_minus_weights_and_activations():
    total, others, weights, activations = 140 * GiB, GiB, 2 * GiB, 3 * GiB
    free = total - others - weights
    budget = gpu_kv_cache_bytes(total, free, others, weights, activations, 0.5)
    assert budget == 70 * GiB - others - weights - activations


def test_a_second_engine_in_the_process_is_not_charged_for_the_first():
    total, others, weights, activations = 140 * GiB, GiB, 2 * GiB, 3 * GiB
    first_cache = gpu_kv_cache_bytes(total, total - others - weights, others, weights, activations, 0.3)
    free_now = total - others - weights - first_cache - weights  # the first engine and our weights are live
    second = gpu_kv_cache_bytes(total, free_now, others, weights, activations, 0.3)
    assert second == first_cache > 0


def test_a_share_larger_than_what_is_free_is_refused_not_shrunk():
    total, others, weights, activations = 140 * GiB, GiB, 2 * GiB, 3 * GiB
    free = 10 * GiB  # another process holds most of the card
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        gpu_kv_cache_bytes(total, free, others, weights, activations, 0.9)
    assert gpu_kv_cache_bytes(total, free, others, weights, activations, 0.08) == int(0.08 * total) - 6 * GiB
