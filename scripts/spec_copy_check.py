"""Does SmolLM2-135M copy when asked to? Greedy answers on the CPU to chapter 18's passages under two instructions
(repeat the passage; correct its planted typos), each replayed through the n-gram proposer: steps per answer.

    python scripts/spec_copy_check.py [OUT_JSON]     (about three minutes on two cores)

Greedy output does not depend on speculation, so the steps a speculating engine needs for an answer can be counted
from the answer alone; fewer steps per token means the answer copies more of its prompt."""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "gpu"))
from spec_decode_bench import SPEC, chat_ids, copy_passages, correct_spelling  # noqa: E402

from nanoserve import LLM, SamplingParams  # noqa: E402
from nanoserve.engine.spec_decode import NgramProposer  # noqa: E402
from course.real_model import smollm2_gguf  # noqa: E402

INSTRUCTIONS = {"repeat": lambda p: f"Repeat this text exactly, word for word:\n\n{p}",
                "correct spelling": correct_spelling}  # the second is spec_decode_bench.py's copy-heavy set
MAX_TOKENS = 128


def steps_for(prompt: list, answer: list, proposer: NgramProposer) -> int:
    """Engine steps a greedy speculating engine needs to emit `answer` after `prompt`."""
    done = steps = 0
    while done < len(answer):
        draft, kept = proposer.propose(prompt + answer[:done]), 0
        while kept < len(draft) and done + kept < len(answer) and draft[kept] == answer[done + kept]:
            kept += 1
        done, steps = done + kept + 1, steps + 1
    return steps


def main() -> None:
    llm = LLM(str(smollm2_gguf()), device="cpu", max_model_len=1024, seed=0)
    tokenizer = llm.get_tokenizer()
    proposer = NgramProposer(SPEC["num_speculative_tokens"], SPEC["prompt_lookup_min"], SPEC["prompt_lookup_max"])
    result = {"provenance": {"command": " ".join(["python", *sys.argv]), "date": time.strftime("%Y-%m-%d"),
                             "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized), float32, CPU",
                             "speculative_config": SPEC, "max_tokens": MAX_TOKENS}, "instructions": {}}
    for name, instruction in INSTRUCTIONS.items():
        prompts = [chat_ids(tokenizer, instruction(p)) for p in copy_passages()]
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                            SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True), use_tqdm=False)
        steps = [steps_for(p, o.outputs[0].token_ids, proposer) for p, o in zip(prompts, outs)]
        result["instructions"][name] = {"steps_per_answer": steps,
                                        "tokens_per_step": round(MAX_TOKENS * len(steps) / sum(steps), 2)}
        print(f"{name:<17} steps per {MAX_TOKENS}-token answer: {steps}, "
              f"{result['instructions'][name]['tokens_per_step']} tokens per step", flush=True)
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/spec_copy_check_cpu.json")
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
