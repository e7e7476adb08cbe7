"""Qwen2 (q/k/v bias) and Llama 3 (llama3 RoPE) at TP=2 over gloo generate exactly transformers' greedy tokens."""
import sys
from pathlib import Path

import pytest

from nanoserve.engine.engine import LLMEngine
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

sys.path.insert(0, str(Path(__file__).parent.parent / "model"))
from hf_reference import hf_greedy, hf_model  # noqa: E402

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110]]
CASES = {  # 4 heads, 2 kv heads: each rank holds 2 q heads, 1 kv head, and the matching bias slices
    "qwen2": ("qwen2", {}),
    "llama3": ("llama", {}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_tp2_equals_transformers(tmp_path, name):
    family, overrides = CASES[name]
    path = make_tiny_checkpoint(tmp_path, family=family, seed=3, tie_word_embeddings=False, **overrides)
    hf = hf_model(path)
    want = [hf_greedy(hf, p, 10) for p in PROMPTS]
    engine = LLMEngine.from_args(str(path), tensor_parallel_size=2, skip_tokenizer_init=True, dtype="float32",
                                 num_kv_blocks=64, block_size=4, enable_prefix_caching=False)
    try:
        ids = [engine.add_request(None, p, SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))
               for p in PROMPTS]
        got = {}
        while engine.has_unfinished_requests():
            for out in engine.step():
                got.setdefault(out.request_id, []).extend(out.outputs[0].token_ids)
    finally:
        engine.shutdown()
    assert [got[i] for i in ids] == want
    assert len({t for w in want for t in w}) > 3
