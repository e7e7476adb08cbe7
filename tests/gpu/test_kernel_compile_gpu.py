"""Appendix A5's first start on a machine, on a GPU: it serves without the kernels that would compile (chapter 10's
Triton kernels, chapter 19's flash-attn-4 on Hopper) and the next start runs them with nothing left to compile. Each
start is a fresh process on empty kernel cache folders (nanoserve's and Triton's)."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

START = """
import json, os, sys, time
from pathlib import Path
from nanoserve import LLM, SamplingParams
from nanoserve.attention.flash4 import kernel_cache_dir
from nanoserve.model.tiny import make_tiny_checkpoint
path = Path(sys.argv[1])
if not path.exists():
    make_tiny_checkpoint(path, seed=0, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=128, vocab_size=512,
                         max_position_embeddings=4096)
flash4_kernels = lambda: len(list(kernel_cache_dir().rglob("*.o")))
triton_kernels = lambda: len(list(Path(os.environ["TRITON_CACHE_DIR"]).glob("*/*.json")))
before = flash4_kernels(), triton_kernels()
llm = LLM(str(path), skip_tokenizer_init=True, max_num_seqs=16, max_model_len=1024, num_kv_blocks=64)
out = llm.generate({"prompt_token_ids": list(range(1, 40))}, SamplingParams(max_tokens=8, temperature=0),
                   use_tqdm=False)[0].outputs[0].token_ids
job = llm.engine.kernel_compile
print(json.dumps({"backend": llm.config.attention_backend, "fused": llm.config.fused_kernels, "tokens": len(out),
                  "flash4_compiled_at_start": flash4_kernels() - before[0],
                  "triton_compiled_at_start": triton_kernels() - before[1],
                  "compile_rc": job.wait() if job else None}))
"""


def start(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASH_ATTENTION_CUTE_DSL_CACHE")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), TRITON_CACHE_DIR=str(tmp_path / "triton"))
    done = subprocess.run([sys.executable, "-c", START, str(tmp_path / "m")], env=env, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_first_start_leaves_its_compiles_to_the_next(tmp_path):
    pytest.importorskip("flash_attn")
    pytest.importorskip("triton")
    from nanoserve.attention.flash4 import flash4_available

    flash4 = flash4_available()
    first = start(tmp_path)
    assert not first["fused"] and first["compile_rc"] == 0 and first["tokens"] == 8
    assert first["backend"] == "flash" and first["flash4_compiled_at_start"] == 0
    second = start(tmp_path)
    assert second["fused"] and second["compile_rc"] is None and second["tokens"] == 8
    assert second["backend"] == ("flash4" if flash4 else "flash")
    assert second["triton_compiled_at_start"] == 0, "the background compile missed a Triton kernel the engine meets"
    assert second["flash4_compiled_at_start"] == 0, "the background compile missed a kernel variant the engine meets"
