"""The engine at TP=2 over gloo generates exactly what it generates at TP=1, and leaves no process behind."""
import gc

import pytest

from nanoserve.engine.engine import LLMEngine
from nanoserve.sampling import SamplingParams

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110]]


def make_engine(path, tp: int) -> LLMEngine:
    return LLMEngine.from_args(str(path), tensor_parallel_size=tp, skip_tokenizer_init=True, dtype="float32",
                               num_kv_blocks=64, block_size=4, enable_prefix_caching=False)


def greedy(engine: LLMEngine, max_tokens: int = 12) -> dict:
    for p in PROMPTS:
        engine.add_request(None, p, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True))
    tokens = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.outputs[0].token_ids)
    return tokens


@pytest.fixture(scope="module")
def untied_ckpt(tmp_path_factory):
    """Untied embeddings make a random tiny model's greedy tokens vary, so equality means something."""
    from nanoserve.model.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tp_engine"), seed=3, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def tp2_engine(untied_ckpt):
    engine = make_engine(untied_ckpt, 2)
    yield engine
    engine.shutdown()


def test_tp2_equals_tp1_token_for_token(untied_ckpt, tp2_engine):
    want = greedy(make_engine(untied_ckpt, 1))
    got = greedy(tp2_engine)
    assert got == want
    assert len({t for toks in want.values() for t in toks}) > 3  # not a degenerate repeat-one-token model


def test_shutdown_stops_every_worker(tp2_engine, gone):
    pids = tp2_engine.executor.worker_pids
    assert len(pids) == 1
    tp2_engine.shutdown()
    assert gone(pids, 1.0) == []
    tp2_engine.shutdown()  # twice is fine


def test_garbage_collected_engine_leaves_no_process(untied_ckpt, gone):
    engine = make_engine(untied_ckpt, 2)
    pids = engine.executor.worker_pids
    greedy(engine, max_tokens=2)
    del engine
    gc.collect()
    assert gone(pids, 10.0) == []


def test_sizes_that_do_not_split_are_clear_errors(untied_ckpt):
    with pytest.raises(ValueError, match="num_attention_heads"):
        make_engine(untied_ckpt, 3)
    from nanoserve.engine.config import EngineConfig
    from nanoserve.model.tiny import tiny_qwen3_config
    from nanoserve.parallel.executor import TensorParallelExecutor

    with pytest.raises(ValueError, match="num_key_value_heads"):  # the one head check: at resolve time
        EngineConfig(str(untied_ckpt), tensor_parallel_size=4).resolve(
            tiny_qwen3_config(num_attention_heads=4, num_key_value_heads=2))
    assert TensorParallelExecutor  # importable without CUDA


def test_tp_ranks_read_input_ids_from_the_host(untied_ckpt):
    """Only rank 0 samples under TP, so the one-step-ahead core and its device token table are never used."""
    engine = make_engine(untied_ckpt, 2)
    try:
        assert not hasattr(engine.core, "table") and not hasattr(engine.executor.runner, "table")
    finally:
        engine.shutdown()