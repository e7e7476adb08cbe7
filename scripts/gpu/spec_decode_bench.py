"""Chapter 18's H200 measurement: batch-1 and batch-8 time per output token with and without n-gram speculation, on a
copy-heavy and a plain prompt set, for nanoserve and vLLM on the same SmolLM2 weights; writes JSON with provenance.

    python3 scripts/gpu/spec_decode_bench.py --gguf PATH --out DIR            (nanoserve, then vLLM in subprocesses)
    python3 scripts/gpu/spec_decode_bench.py --worker vllm --spec on|off ...  (one vLLM configuration; internal)

Prompts go to both engines as the same token ids. Each engine generates exactly --max-tokens greedy tokens
(ignore_eos) per request; TPOT is (time for max_tokens - time for 1 token) / (max_tokens - 1), per request at batch 1
and per batch at batch 8, over --runs runs."""
import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

SPEC = {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
SPEC_K4 = dict(SPEC, num_speculative_tokens=4)  # nanoserve only, in the same run: what a longer proposal buys
QUESTIONS = ["Write a short story about a robot who learns to paint.", "Explain how a bicycle works.",
             "Describe a walk through a busy city market.", "Why is the sky blue? Explain it to a child.",
             "Give advice to someone starting to learn the piano.", "What makes a good friend?",
             "Describe the life cycle of a butterfly.", "Write a letter to a pen pal about your town."]


def copy_passages(count: int = 8, chars: int = 750) -> list:
    """`count` passages of about 170 tokens (more than the 128 generated, so that the whole answer can be copied):
    windows of whole sentences of the course's system prompt, starting at evenly spaced sentences."""
    from course.real_text import SYSTEM_PROMPT

    sentences = [s.strip() for s in SYSTEM_PROMPT.replace("\n", " ").split(". ") if s.strip()]
    passages = []
    for i in range(count):
        text, j = "", i * len(sentences) // count
        while len(text) < chars:
            text += sentences[j % len(sentences)] + ". "
            j += 1
        passages.append(text.strip())
    return passages


def with_typos(text: str, every: int = 9) -> str:
    """`text` with a planted typo in every `every`-th word of more than four letters (its 3rd and 4th letters
    swapped), so that correcting it is an editing task whose answer copies the passage."""
    words = text.split(" ")
    for i in range(3, len(words), every):
        w = words[i]
        if len(w) > 4:
            words[i] = w[:2] + w[3] + w[2] + w[4:]
    return " ".join(words)


def correct_spelling(passage: str) -> str:
    """The copy-heavy set's request for one passage: asked to repeat a passage, SmolLM2-135M paraphrased or drifted
    on most of them (scripts/spec_copy_check.py), so the set asks for an edit whose answer copies the passage."""
    return f"Fix the spelling mistakes in this text and write it out again in full:\n\n{with_typos(passage)}"


def chat_ids(tokenizer, content: str) -> list:
    """Token ids of one user message through the model's chat template, ready for the assistant's answer."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def prompt_sets(tokenizer) -> dict:
    """{set name: [token ids]} for the copy-heavy and the plain set."""
    return {"copy-heavy": [chat_ids(tokenizer, correct_spelling(p)) for p in copy_passages()],
            "plain": [chat_ids(tokenizer, q) for q in QUESTIONS]}


def measure(generate, sets: dict, max_tokens: int, runs: int, counters) -> list:
    """Rows of {set, batch, tpot_ms (median), spread, acceptance_rate} for batch 1 and batch 8."""
    rows = []
    for name, prompts in sets.items():
        for batch in (1, 8):
            groups = [[p] for p in prompts] if batch == 1 else [prompts[:8]]
            generate(groups[0], 1), generate(groups[0], max_tokens)  # warm-up
            before, tpots = counters(), []
            for _ in range(runs):
                for group in groups:
                    start = time.perf_counter()
                    generate(group, 1)
                    first = time.perf_counter() - start
                    start = time.perf_counter()
                    generate(group, max_tokens)
                    tpots.append(1e3 * (time.perf_counter() - start - first) / (max_tokens - 1))
            after = counters()
            drafted = after[0] - before[0]
            rows.append({"set": name, "batch": batch, "tpot_ms": statistics.median(tpots),
                         "tpot_ms_min": min(tpots), "tpot_ms_max": max(tpots), "samples": len(tpots), "tpots_ms": tpots,
                         "acceptance_rate": (after[1] - before[1]) / drafted if drafted else 0.0})
            print(f"  {name:<11} batch {batch}: TPOT {rows[-1]['tpot_ms']:.3f} ms "
                  f"({min(tpots):.3f}-{max(tpots):.3f}), acceptance {rows[-1]['acceptance_rate']:.0%}", flush=True)
    return rows


def run_nanoserve(gguf: str, sets: dict, args) -> dict:
    """Both configurations of nanoserve, one after the other, with their start-up time."""
    from nanoserve import LLM, SamplingParams

    result = {}
    for mode in ("off", "on", "on-k4", "on-overlap"):
        start = time.perf_counter()
        llm = LLM(gguf, dtype="bfloat16", flash4_compile="startup", max_model_len=2048, gpu_memory_utilization=0.3,
                  seed=0, speculative_config={"off": None, "on-k4": SPEC_K4}.get(mode, SPEC),
                  async_scheduling=True if mode == "on-overlap" else None)  # on-overlap: chapter 18, section 9
        ready = time.perf_counter() - start

        def generate(prompts, n):
            return llm.generate([{"prompt_token_ids": p} for p in prompts],
                                SamplingParams(temperature=0, max_tokens=n, ignore_eos=True), use_tqdm=False)

        def counters():
            s = llm.llm_engine.stats
            return getattr(s, "num_draft_tokens", 0), getattr(s, "num_accepted_tokens", 0)

        print(f"nanoserve, speculation {mode} (ready in {ready:.1f} s)", flush=True)
        rows = measure(generate, sets, args.max_tokens, args.runs, counters)
        outs = generate(sets["copy-heavy"], args.max_tokens)
        result[mode] = {"ready_s": ready, "rows": rows, "copy_outputs": [o.outputs[0].token_ids for o in outs],
                        "graph_replays": dict(getattr(llm.llm_engine.core.executor, "replays", {}))}
        llm.shutdown()
        del llm
        gc.collect()
    same = sum(a == b for a, b in zip(result["off"]["copy_outputs"], result["on"]["copy_outputs"]))
    result["identical_copy_outputs"] = f"{same} of {len(sets['copy-heavy'])}"
    return result


def run_vllm_worker(args) -> None:
    """One vLLM configuration in this process; its rows go to --worker-out."""
    from vllm import LLM, SamplingParams

    sets = json.loads(Path(args.prompts).read_text())
    start = time.perf_counter()
    llm = LLM(model=args.model_dir, dtype="bfloat16", flash4_compile="startup", max_model_len=2048,
              gpu_memory_utilization=0.3, seed=0, disable_log_stats=False,
              speculative_config=SPEC if args.spec == "on" else None)
    ready = time.perf_counter() - start

    def generate(prompts, n):
        return llm.generate([{"prompt_token_ids": p} for p in prompts],
                            SamplingParams(temperature=0, max_tokens=n, ignore_eos=True), use_tqdm=False)

    def counters():
        values = {m.name: getattr(m, "value", 0) for m in llm.get_metrics()}
        return values.get("vllm:spec_decode_num_draft_tokens", 0), values.get("vllm:spec_decode_num_accepted_tokens", 0)

    print(f"vLLM, speculation {args.spec} (ready in {ready:.1f} s)", flush=True)
    rows = measure(generate, sets, args.max_tokens, args.runs, counters)
    Path(args.worker_out).write_text(json.dumps({"ready_s": ready, "rows": rows}))


def save_safetensors(gguf: Path, out_dir: Path) -> None:
    """The GGUF dequantized by transformers, in bf16, as the safetensors directory vLLM loads."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    config = model.config
    if hasattr(config, "quantization_config"):  # transformers refuses to save a model it loaded from a GGUF
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out_dir)


def provenance(args) -> dict:
    """Where and how this ran."""
    import torch

    vllm = subprocess.run([sys.executable, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=args.vllm_path)).stdout.strip()
    from nanobench.provenance import git_commit  # the stated commit, else the checkout's (with "-dirty")

    commit = git_commit()
    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "vllm": vllm or "unavailable",
            "python": platform.python_version(), "nanoserve_commit": commit or "unknown",
            "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "date": time.strftime("%Y-%m-%d"),
            "config": {"speculative_config": SPEC, "nanoserve_also": SPEC_K4, "max_tokens": args.max_tokens, "runs": args.runs,
                       "dtype": "bfloat16", "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized)"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf")
    parser.add_argument("--out", default="/tmp/spec_out")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--vllm-path", default="/tmp/vsite")
    parser.add_argument("--verify-kernel", choices=["varlen", "kvcache"], default="varlen",
                        help="kvcache: nanoserve's verify lanes through the kvcache-kernel experiment")
    parser.add_argument("--worker", choices=["vllm"])
    parser.add_argument("--spec", choices=["on", "off"])
    parser.add_argument("--model-dir")
    parser.add_argument("--prompts")
    parser.add_argument("--worker-out")
    args = parser.parse_args()
    if args.worker:
        return run_vllm_worker(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from nanoserve import LLM

    if args.verify_kernel == "kvcache":
        from spec_step_profile import use_kvcache_kernel
        use_kvcache_kernel()
    gguf = Path(args.gguf)
    sets = prompt_sets(LLM(str(gguf), device="cpu", max_model_len=64, num_kv_blocks=8).get_tokenizer())
    (out / "prompts.json").write_text(json.dumps(sets))
    result = {"provenance": provenance(args), "nanoserve": run_nanoserve(str(gguf), sets, args), "vllm": {}}
    (out / "spec_decode_h200.json").write_text(json.dumps(result, indent=1))
    model_dir = Path("/tmp/smollm2-st")
    save_safetensors(gguf, model_dir)
    env = dict(os.environ, PYTHONPATH=args.vllm_path, VLLM_USE_FLASHINFER_SAMPLER="0")
    for mode in ("off", "on"):
        worker_out = out / f"vllm_{mode}.json"
        cmd = [sys.executable, __file__, "--worker", "vllm", "--spec", mode, "--model-dir", str(model_dir),
               "--prompts", str(out / "prompts.json"), "--worker-out", str(worker_out), "--runs", str(args.runs),
               "--max-tokens", str(args.max_tokens)]
        done = subprocess.run(cmd, env=env, timeout=300)
        if done.returncode == 0:
            result["vllm"][mode] = json.loads(worker_out.read_text())
        else:
            print(f"vLLM, speculation {mode}: exit {done.returncode}", flush=True)
        (out / "spec_decode_h200.json").write_text(json.dumps(result, indent=1))
    result["rows"] = summary_rows(result)
    (out / "spec_decode_h200.json").write_text(json.dumps(result, indent=1))
    for row in result["rows"]:
        print(row)


def summary_rows(result: dict) -> list:
    """One row per engine, set and batch: TPOT off and on, and the acceptance rate with speculation on."""
    rows = []
    for engine in ("nanoserve", "vllm"):
        runs = result.get(engine, {})
        if "off" not in runs or "on" not in runs:
            continue
        for off, on in zip(runs["off"]["rows"], runs["on"]["rows"]):
            rows.append({"engine": engine, "set": off["set"], "batch": off["batch"], "tpot_ms_off": off["tpot_ms"],
                         "tpot_ms_on": on["tpot_ms"], "acceptance_rate": on["acceptance_rate"],
                         "tpot_ms_on_min": on["tpot_ms_min"], "tpot_ms_on_max": on["tpot_ms_max"]})
        for mode, label in (("on-k4", "k=4"), ("on-overlap", "overlapped")):
            for off, on in zip(runs["off"]["rows"], runs.get(mode, {}).get("rows", [])):
                rows.append({"engine": f"{engine} {label}", "set": off["set"], "batch": off["batch"],
                             "tpot_ms_off": off["tpot_ms"], "tpot_ms_on": on["tpot_ms"],
                             "acceptance_rate": on["acceptance_rate"], "tpot_ms_on_min": on["tpot_ms_min"],
                             "tpot_ms_on_max": on["tpot_ms_max"]})
    return rows


if __name__ == "__main__":
    main()
