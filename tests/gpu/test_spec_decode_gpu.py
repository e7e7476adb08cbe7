"""Speculative decoding on the GPU: SmolLM2 in bf16 through verify-step graphs, teacher-forced against fp32."""
import pytest
from real_model import assert_fp32_argmax_or_near_ties, gguf_path  # noqa: F401 (a fixture)

pytestmark = pytest.mark.gpu

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
PASSAGE = ("The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran away into the forest, "
           "where it met an old owl who lived in a hollow oak tree.")
CHATS = [[{"role": "user", "content": f"Repeat this text exactly, word for word:\n\n{PASSAGE}"}],
         [{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "user", "content": "List the days of the week, then list them again."}]]


def speculating_llm(gguf_path, overlap: bool, **options):
    """SmolLM2 in bf16 with n-gram speculation; `overlap`: plain steps one step ahead (chapter 18, section 9)."""
    from nanoserve import LLM

    return LLM(str(gguf_path), flash4_compile="startup",
               dtype="bfloat16", speculative_config=SPEC, async_scheduling=overlap, **options)


@pytest.mark.parametrize("overlap", [False, True])
def test_speculative_greedy_is_fp32_argmax_or_near_ties_and_uses_verify_graphs(gguf_path, overlap):
    from nanoserve import SamplingParams

    llm = speculating_llm(gguf_path, overlap, max_model_len=2048, gpu_memory_utilization=0.3)
    outs = llm.chat(CHATS[:1], SamplingParams(temperature=0, max_tokens=64), use_tqdm=False)  # batch 1
    outs += llm.chat(CHATS, SamplingParams(temperature=0, max_tokens=64), use_tqdm=False)  # a batch of three
    stats, executor = llm.llm_engine.stats, llm.llm_engine.core.executor
    assert executor.replays["verify"] > 0 and stats.num_accepted_tokens > 0
    assert stats.eager_steps == 0, "every step should replay a graph"
    llm.shutdown()
    assert_fp32_argmax_or_near_ties(gguf_path, outs)


@pytest.mark.parametrize("overlap", [False, True])
def test_speculative_greedy_under_preemption_is_fp32_argmax_or_near_ties(gguf_path, overlap):
    """Three 256-token blocks for three sequences that each outgrow one block: some are preempted and recomputed."""
    from nanoserve import SamplingParams

    llm = speculating_llm(gguf_path, overlap, max_model_len=768, num_kv_blocks=3)
    outs = llm.chat(CHATS, SamplingParams(temperature=0, max_tokens=300, ignore_eos=True), use_tqdm=False)
    core = llm.llm_engine.core
    assert core.scheduler.num_preemptions > 0 and core.stats.num_accepted_tokens > 0
    assert all(len(o.outputs[0].token_ids) == 300 for o in outs)
    llm.shutdown()
    assert_fp32_argmax_or_near_ties(gguf_path, outs)
