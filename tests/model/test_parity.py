"""Our Qwen3 equals transformers' Qwen3ForCausalLM on tiny random checkpoints (float32)."""
import pytest
import torch
import transformers

from nanoserve.model.loader import load_qwen3
from nanoserve.model.tiny import make_tiny_checkpoint

CONFIGS = {
    "tied-gqa": dict(),
    # head_dim (24) != hidden / heads (16), untied head, 3 query heads per kv head, q/k/v/o biases
    "untied-wide-heads": dict(hidden_size=48, num_attention_heads=3, num_key_value_heads=1, head_dim=24,
                              tie_word_embeddings=False, attention_bias=True, num_hidden_layers=3),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    """(our model, transformers' model) loaded from the same tiny checkpoint."""
    path = make_tiny_checkpoint(tmp_path_factory.mktemp(request.param), seed=1, **CONFIGS[request.param])
    ours = load_qwen3(path, dtype=torch.float32)
    theirs = transformers.Qwen3ForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    return ours, theirs


def test_logits_match_transformers(pair):
    ours, theirs = pair
    ids = torch.randint(0, ours.config.vocab_size, (37,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        mine = ours.compute_logits(ours(ids, torch.arange(len(ids))))
        ref = theirs(ids[None]).logits[0]
    assert mine.shape == (37, ours.config.vocab_size)
    torch.testing.assert_close(mine, ref)


def test_greedy_loop_without_cache_matches_generate(pair):
    ours, theirs = pair
    prompt = torch.tensor([3, 14, 15, 92, 65, 35])
    tokens = prompt.clone()
    with torch.no_grad():
        for _ in range(12):  # recompute the whole sequence every step: no KV cache
            hidden = ours(tokens, torch.arange(len(tokens)))
            tokens = torch.cat([tokens, ours.compute_logits(hidden[-1:]).argmax(-1)])
        ref = theirs.generate(prompt[None], attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                              max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)[0]
    assert tokens.tolist() == ref.tolist()


def test_bfloat16_runs_close_to_float32(pair):
    ours, _ = pair
    ids = torch.arange(10)
    with torch.no_grad():
        ref = ours.compute_logits(ours(ids, torch.arange(10)))
        low = ours.to(torch.bfloat16)
        try:
            out = low.compute_logits(low(ids, torch.arange(10)))
        finally:
            ours.to(torch.float32)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.1)
