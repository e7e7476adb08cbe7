"""The real SmolLM2 GGUF on the GPU: bf16 greedy through the graph and cascade paths, teacher-forced against fp32."""
import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gguf_path():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("flash_attn")
    from course.real_model import cached_gguf

    path = cached_gguf()
    if path is None:
        pytest.skip("the real model is not in the cache (python -m course.real_model fetches it)")
    return path


def test_real_answers_through_graphs_and_cascade_are_fp32_argmax_or_near_ties(gguf_path):
    transformers = pytest.importorskip("transformers")
    from course.real_text import capital_questions, chat_prompts
    from nanoserve import LLM, SamplingParams

    llm = LLM(str(gguf_path), dtype="bfloat16", max_num_seqs=64, max_model_len=2048, gpu_memory_utilization=0.3)
    prompts = chat_prompts(llm.get_tokenizer(), capital_questions(48))
    llm.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)  # the system prompt, cached
    runner = llm.engine.executor
    before = runner.replays["cascade"]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)
    assert runner.replays["cascade"] > before, "48 lanes sharing three blocks should decode through the cascade"
    llm.shutdown()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32).cuda().eval()
    with torch.no_grad():
        for out in outs:
            gen = list(out.outputs[0].token_ids)
            ids = torch.tensor([out.prompt_token_ids + gen], device="cuda")
            logits = model(ids).logits[0, len(out.prompt_token_ids) - 1:-1].float()
            chosen = logits.gather(1, torch.tensor(gen, device="cuda")[:, None])[:, 0]
            best = logits.max(-1).values
            assert bool((chosen >= best - 0.02 * (best - logits.min(-1).values)).all()), (best - chosen).tolist()
