"""gpu_memory_utilization is this engine's own share of the card, as in vLLM: memory another process held when the
engine started does not shrink it, and a share larger than what is free is still refused."""
import gc
import subprocess
import sys

import pytest
import torch

from nanoserve import LLM, SamplingParams
from nanoserve.model.tiny import make_tiny_checkpoint

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=128, vocab_size=512, max_position_embeddings=4096)
ARGS = dict(skip_tokenizer_init=True, enforce_eager=True, max_num_seqs=8, max_model_len=1024)
HOLD = "import sys, torch; x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device='cuda'); print('held', flush=True); sys.stdin.read()"


def kv_blocks(path, utilization: float) -> int:
    """KV blocks an engine at `utilization` allocates here; it also generates, to show the cache works."""
    llm = LLM(str(path), gpu_memory_utilization=utilization, **ARGS)
    try:
        out = llm.generate([{"prompt_token_ids": [1, 2, 3]}], SamplingParams(max_tokens=4, ignore_eos=True),
                           use_tqdm=False)
        assert len(out[0].outputs[0].token_ids) == 4
        return llm.engine.executor.num_kv_blocks
    finally:
        llm.engine.shutdown()
        del llm
        gc.collect()
        torch.cuda.empty_cache()


def test_another_process_on_the_card_does_not_shrink_the_share(tmp_path):
    path = make_tiny_checkpoint(tmp_path / "m", seed=0, **TINY)
    alone = kv_blocks(path, 0.2)
    total = torch.cuda.mem_get_info()[1]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(int(0.3 * total))], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        beside = kv_blocks(path, 0.2)
        assert beside >= 0.97 * alone, (beside, alone)  # before: 0.2 of the card less the other's 0.3, no room
        with pytest.raises(ValueError, match="gpu_memory_utilization"):
            LLM(str(path), gpu_memory_utilization=0.9, **ARGS)  # more than is free: refused, not shrunk
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
