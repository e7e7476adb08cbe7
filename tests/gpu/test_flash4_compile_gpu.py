"""Chapter 19's first start on a machine, on a Hopper GPU: flash-attn 2 at once, flash-attn-4 from the next start
on, with nothing left to compile then. Each start is a fresh process on an empty kernel cache folder."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

START = """
import json, sys, time
from pathlib import Path
from nanoserve import LLM, SamplingParams
from nanoserve.attention.flash4 import kernel_cache_dir
from nanoserve.model.tiny import make_tiny_checkpoint
path = Path(sys.argv[1])
if not path.exists():
    make_tiny_checkpoint(path, seed=0, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=128, vocab_size=512,
                         max_position_embeddings=4096)
kernels = lambda: len(list(kernel_cache_dir().rglob("*.o")))
before, start = kernels(), time.perf_counter()
llm = LLM(str(path), skip_tokenizer_init=True, max_num_seqs=16, max_model_len=1024, num_kv_blocks=64)
ready = time.perf_counter() - start
out = llm.generate({"prompt_token_ids": list(range(1, 40))}, SamplingParams(max_tokens=8, temperature=0),
                   use_tqdm=False)[0].outputs[0].token_ids
job = llm.engine.kernel_compile
print(json.dumps({"backend": llm.config.attention_backend, "ready_s": ready, "tokens": len(out),
                  "compiled_at_start": kernels() - before, "compile_rc": job.wait() if job else None}))
"""


def start(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASH_ATTENTION_CUTE_DSL_CACHE")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    done = subprocess.run([sys.executable, "-c", START, str(tmp_path / "m")], env=env, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_first_start_serves_on_flash2_and_compiles_flash4_for_the_next(tmp_path):
    pytest.importorskip("flash_attn")
    from nanoserve.attention.flash4 import flash4_available

    if not flash4_available():
        pytest.skip("flash-attn-4 is not installed, or this GPU is older than Hopper")
    first = start(tmp_path)
    assert first["backend"] == "flash" and first["compile_rc"] == 0 and first["tokens"] == 8
    second = start(tmp_path)
    assert second["backend"] == "flash4" and second["compile_rc"] is None and second["tokens"] == 8
    assert second["compiled_at_start"] == 0, "the background compile missed a kernel variant the engine meets"
