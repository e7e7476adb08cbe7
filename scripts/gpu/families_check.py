"""Qwen2.5, Llama 3.2 and Qwen3 on one GPU: greedy agreement with transformers, and output tok/s per family.

Run on one CUDA GPU with flash-attn, from the repository root:
    python scripts/gpu/families_check.py [--requests 32] [--prompt-len 256] [--max-tokens 128]
Builds random-weight bf16 checkpoints with the exact shapes of Qwen2.5-0.5B, Llama-3.2-1B (llama3 RoPE
scaling) and Qwen3-0.6B (weights are random: only shapes, speed and agreement matter). For each, the
engine's GPU defaults (bf16, flash-attn, CUDA graphs) generate greedily; transformers (bf16) scores
the same tokens teacher-forced, and every chosen token must be its argmax or within 2% of the logit
range of it (bf16 rounding differs between the two). Then a random workload measures output tok/s.
Writes families_check.json to $OUT (or .) and prints a table last.
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from tp_check import Stage, run, teacher_forced  # noqa: E402

from nanoserve.engine.engine import LLMEngine  # noqa: E402
from nanoserve.model.tiny import QWEN3_0_6B_CONFIG, make_checkpoint_from_config  # noqa: E402
from nanoserve.sampling import SamplingParams  # noqa: E402

QWEN2_5_0_5B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "use_sliding_window": False, "max_window_layers": 21, "tie_word_embeddings": True, "vocab_size": 151936,
    "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16",
}
LLAMA_3_2_1B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True, "vocab_size": 128256,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16",
}
FAMILIES = {"qwen2.5-0.5b": QWEN2_5_0_5B_CONFIG, "llama-3.2-1b": LLAMA_3_2_1B_CONFIG, "qwen3-0.6b": QWEN3_0_6B_CONFIG}


def check_family(name: str, config: dict, tmp: Path, a, check_prompts: list, bench_prompts: list) -> dict:
    with Stage(f"{name}: build random-weight bf16 checkpoint"):
        path = make_checkpoint_from_config(config, tmp / name, dtype=torch.bfloat16, with_tokenizer=False)
    with Stage(f"{name}: start engine (bf16, flash-attn, CUDA graphs)"):
        engine = LLMEngine.from_args(str(path), skip_tokenizer_init=True, max_model_len=2048,
                                     gpu_memory_utilization=0.85)
    try:
        with Stage(f"{name}: greedy check prompts (also the warm-up)"):
            rows, _, _ = run(engine, check_prompts,
                             SamplingParams(temperature=0, max_tokens=a.check_tokens, ignore_eos=True))
        with Stage(f"{name}: throughput ({a.requests} x {a.prompt_len}+{a.max_tokens} tokens)"):
            _, n_out, seconds = run(engine, bench_prompts,
                                    SamplingParams(temperature=0, max_tokens=a.max_tokens, ignore_eos=True))
        backend = engine.config.attention_backend
    finally:
        engine.shutdown()
        del engine
        torch.cuda.empty_cache()
    with Stage(f"{name}: transformers teacher-forced check"):
        agree = teacher_forced(path, check_prompts, {name: rows})[name]
    return dict(model_type=config["model_type"], attention_backend=backend, agreement=agree,
                ok=agree["within_margin"] == agree["tokens"], output_tokens=n_out, seconds=round(seconds, 3),
                output_tok_per_s=round(n_out / seconds, 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--check-prompts", type=int, default=4)
    ap.add_argument("--check-tokens", type=int, default=32)
    ap.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated subset of {list(FAMILIES)}")
    ap.add_argument("--stage-timeout", type=float, default=150.0)
    a = ap.parse_args()
    Stage.timeout_s = a.stage_timeout
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 2
    rng = random.Random(0)
    check_prompts = [[rng.randrange(10000) for _ in range(64)] for _ in range(a.check_prompts)]
    bench_prompts = [[rng.randrange(10000) for _ in range(a.prompt_len)] for _ in range(a.requests)]
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "command": " ".join(sys.argv),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "model": "random weights, exact real shapes",
              "workload": dict(requests=a.requests, prompt_len=a.prompt_len, max_tokens=a.max_tokens,
                               temperature=0, ignore_eos=True), "families": {}}
    out_dir = Path(os.environ.get("OUT", "."))
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.families.split(","):
            result["families"][name] = check_family(name, FAMILIES[name], Path(tmp), a, check_prompts, bench_prompts)
            (out_dir / "families_check.json").write_text(json.dumps(result, indent=2))  # partial results survive
    print(f"\n{'family':14s} {'type':6s} {'backend':8s} {'argmax':>9s} {'within 2%':>10s} {'out tok/s':>10s}")
    for name, r in result["families"].items():
        g = r["agreement"]
        print(f"{name:14s} {r['model_type']:6s} {r['attention_backend']:8s} {g['argmax']:>4d}/{g['tokens']:<4d} "
              f"{g['within_margin']:>5d}/{g['tokens']:<4d} {r['output_tok_per_s']:>10.1f}")
    return 0 if all(r["ok"] for r in result["families"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
