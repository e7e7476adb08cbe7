"""The real SmolLM2 GGUF on the GPU: bf16 greedy through the graph and cascade paths, teacher-forced against fp32."""
import pytest
from real_model import assert_fp32_argmax_or_near_ties, gguf_path  # noqa: F401 (a fixture)

pytestmark = pytest.mark.gpu


def test_real_answers_through_graphs_and_cascade_are_fp32_argmax_or_near_ties(gguf_path):
    from course.real_text import capital_questions, chat_prompts
    from nanoserve import LLM, SamplingParams

    llm = LLM(str(gguf_path), flash4_compile="startup",
              dtype="bfloat16", max_num_seqs=64, max_model_len=2048, gpu_memory_utilization=0.3)
    prompts = chat_prompts(llm.get_tokenizer(), capital_questions(48))
    llm.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)  # the system prompt, cached
    runner = llm.engine.executor
    before = runner.replays["cascade"]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)
    assert runner.replays["cascade"] > before, "48 lanes sharing three blocks should decode through the cascade"
    llm.shutdown()
    assert_fp32_argmax_or_near_ties(gguf_path, outs)
