"""Chapter 10 section 9 on a GPU: a start on an empty Triton cache compiles every variant inside the rehearsal, and
nothing after it compiles another: the memory profile, the graph capture, serving (batch 1, batches past the split's
rows, long prompts, temperature sampling) and a second, eager engine's steps of odd and even length."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

START = """
import json, sys
from nanoserve import LLM, SamplingParams
from nanoserve.engine import selector
from nanoserve.kernels import fused, sampling
from nanoserve.model.tiny import make_tiny_checkpoint
path = make_tiny_checkpoint(sys.argv[1], seed=0, hidden_size=256, intermediate_size=1024, num_hidden_layers=2,
                            num_attention_heads=8, num_key_value_heads=4, head_dim=128, vocab_size=512,
                            max_position_embeddings=4096)
builders = [fused._rms_norm_kernel, fused._rotary_kernel, fused._silu_mul_kernel, fused._split_matmul_kernel,
            fused._partial_norm_kernel, sampling._sample_kernel]
variants = lambda: {b.__name__: sum(len(c[0]) for c in b().device_caches.values()) for b in builders}
seen, rehearse = {}, selector.compile_variants
def counted(runner):  # the first engine's rehearsal (the eager engine's finds everything compiled)
    seen.setdefault("before", variants())
    rehearse(runner)
    seen.setdefault("rehearsal", variants())
selector.compile_variants = counted
# no num_kv_blocks: the memory profile's step runs too (its forward of max_num_batched_tokens tokens)
with LLM(str(path), skip_tokenizer_init=True, max_num_seqs=32, max_model_len=1024, gpu_memory_utilization=0.3) as llm:
    seen["ready"] = variants()
    prompts = [{"prompt_token_ids": [(7 * i + j) % 500 + 1 for j in range(n)]} for i, n in enumerate((5, 40, 300))]
    greedy = llm.generate(prompts[:1], SamplingParams(max_tokens=8, temperature=0), use_tqdm=False)
    # plain temperature rows: the head graphs sample them with the one-pass kernel
    llm.generate(prompts * 8, SamplingParams(max_tokens=8, temperature=0.8), use_tqdm=False)
    seen["served"] = variants()
    seen["tokens"] = len(greedy[0].outputs[0].token_ids)
# eager steps of odd and even token counts (their inputs packed at other offsets than a graph's)
with LLM(str(path), skip_tokenizer_init=True, max_model_len=1024, num_kv_blocks=64, enforce_eager=True) as eager:
    eager.generate([{"prompt_token_ids": list(range(1, n + 1))} for n in (7, 8, 33, 34)],
                   SamplingParams(max_tokens=3, temperature=0), use_tqdm=False)
    seen["eager"] = variants()
print(json.dumps(seen))
"""


def test_the_rehearsal_compiles_every_variant_serving_meets(tmp_path):
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    done = subprocess.run([sys.executable, "-c", START, str(tmp_path / "m")], env=env, capture_output=True, text=True,
                          timeout=140)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(seen["before"].values()) == {0} and seen["tokens"] == 8
    assert min(seen["rehearsal"].values()) >= 1, seen
    assert seen["ready"] == seen["rehearsal"], "the profile run or the graph capture compiled a variant the rehearsal missed"
    assert seen["served"] == seen["rehearsal"], "serving compiled a variant the rehearsal missed"
    assert seen["eager"] == seen["rehearsal"], "an eager step compiled a variant the rehearsal missed"
