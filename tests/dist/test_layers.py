"""Each tensor-parallel layer, and the whole model, equals its dense counterpart at TP=2 over gloo."""
import pytest
import torch

from nanoserve.model.loader import load_qwen3
from course import tp_checks as checks
from nanoserve.parallel.group import TPGroup
from nanoserve.parallel.layers import ShardedLayers
from nanoserve.parallel.workers import RankPool


@pytest.fixture(scope="module")
def pool():
    with RankPool(2) as p:
        yield p


@pytest.mark.parametrize("dims", [
    dict(hidden=32, head_dim=8, n_heads=4, n_kv_heads=2, inter=64, vocab=100, tokens=7),
    dict(hidden=48, head_dim=4, n_heads=6, n_kv_heads=6, inter=96, vocab=101, tokens=3),  # odd vocab: padded shard
])
def test_each_layer_matches_dense(pool, dims):
    errors = pool.call(checks.layer_parity, dims)
    assert set(errors) == {"column", "qkv", "merged", "row", "embedding", "lm_head"}
    assert max(errors.values()) < 1e-4, errors


@pytest.mark.parametrize("fixture", ["tiny_ckpt", "tiny_ckpt_one_kv"])
def test_model_logits_match_dense(pool, fixture, request):
    path = request.getfixturevalue(fixture)
    ids = [3, 17, 5, 99, 42, 8, 1]
    got = pool.call(checks.sharded_logits, str(path), ids)
    model = load_qwen3(path, dtype=torch.float32)
    with torch.inference_mode():
        want = model.compute_logits(model(torch.tensor(ids), torch.arange(len(ids))))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_tp1_needs_no_process_group():
    layers = ShardedLayers(TPGroup())
    assert (layers.tp_rank, layers.tp_size) == (0, 1)
    head = layers.lm_head(10, 4)
    head.weight.data.normal_()
    assert head(torch.randn(2, 4)).shape == (2, 10)
    assert not torch.distributed.is_initialized()


def shapes_only(size: int) -> TPGroup:
    return TPGroup(0, size, process_group="placeholder: building layers runs no collective")


def test_clear_errors_for_sizes_that_do_not_split():
    with pytest.raises(ValueError, match="heads"):
        ShardedLayers(shapes_only(3)).qkv(48, 8, 4, 2)
    with pytest.raises(ValueError, match="kv heads|divisible"):
        ShardedLayers(shapes_only(4)).qkv(64, 8, 12, 6)
    with pytest.raises(TypeError, match="TPGroup"):
        ShardedLayers(2)
    with pytest.raises(ValueError, match="process group"):
        TPGroup(rank=0, size=2)
