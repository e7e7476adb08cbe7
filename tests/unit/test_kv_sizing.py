"""KV-cache sizing on CUDA: gpu_memory_utilization is this engine's share, as in vLLM (other processes not charged)."""
import pytest

from nanoserve.engine.config import gpu_kv_cache_bytes, memory_outside_pool

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


def test_another_process_on_the_card_before_the_start_is_not_charged():
    total, weights, activations = 80 * GiB, 2 * GiB, 3 * GiB
    other_process, context, workspaces = 32 * GiB, GiB // 2, GiB // 4
    baseline = (other_process + context, 0)  # taken before this engine loaded anything into torch's pool
    reserved = weights + activations  # this engine's pool after the profile
    free = total - other_process - context - workspaces - reserved
    outside = memory_outside_pool(total, free, reserved, baseline)
    assert outside == workspaces
    budget = gpu_kv_cache_bytes(total, free, outside, weights, activations, 0.4)
    assert budget == int(0.4 * total) - workspaces - weights - activations
    # without a baseline everything outside the pool counts: the other process eats the whole share
    assert gpu_kv_cache_bytes(total, free, memory_outside_pool(total, free, reserved), weights, activations, 0.4) < 0


def test_a_baseline_never_charges_less_than_nothing():
    assert memory_outside_pool(80 * GiB, 50 * GiB, 10 * GiB, (25 * GiB, 0)) == 0
