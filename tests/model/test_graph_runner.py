"""Greedy output through the GraphRunner (its graphs' functions, uncaptured on a CPU: decode, mixed-step and cascade
variants) equals transformers', with chunked prefill, prefix-cache hits, preemption and the host one step ahead."""
import pytest
import torch
from hf_reference import hf_greedy, hf_model

from nanoserve.engine import selector
from nanoserve.engine.graph_runner import GraphRunner
from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

PIECE_PROMPTS = [1, 3, 140, 13, 300, 2]  # 140 and 300 tokens: more than one 128-query piece
MAX_TOKENS = [9, 5, 6, 3, 7, 8]


def graph_executor(config, model_config):
    """A GraphRunner on the CPU: every variant built, its functions run uncaptured where a graph would replay."""
    runner = selector.build_runner(config, model_config)
    variants = selector.graph_variants(config, runner.backend)
    for v in variants:
        if v.name == "cascade":
            v.min_shared_reads = 8  # tiny prompts: let small shared prefixes take the cascade too
    return GraphRunner(runner, variants)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=4, tie_word_embeddings=False,
                                max_position_embeddings=512)


@pytest.fixture(scope="module")
def want(checkpoint):
    model = hf_model(checkpoint)
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in PIECE_PROMPTS]
    return prompts, [hf_greedy(model, p, m) for p, m in zip(prompts, MAX_TOKENS)]


@pytest.fixture(autouse=True)
def layout_runner(monkeypatch):
    monkeypatch.setattr(selector, "build_executor", graph_executor)


def generate(llm, prompts):
    params = [SamplingParams(temperature=0, max_tokens=m) for m in MAX_TOKENS]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("engine_args", [
    dict(),
    dict(max_num_batched_tokens=40, max_num_seqs=8),  # chunked prefill: pieces of later chunks attend a cached context
    dict(num_kv_blocks=100, max_num_batched_tokens=64, max_num_seqs=8),  # preemption: recomputed prompts come back as pieces
], ids=["batch", "chunked", "preempted"])
def test_greedy_through_the_layout_equals_transformers(checkpoint, want, overlap, engine_args):
    prompts, expected = want
    llm = LLM(str(checkpoint), skip_tokenizer_init=True, device="cpu", block_size=4, max_model_len=512,
              async_scheduling=overlap, enable_prefix_caching=False, **{"num_kv_blocks": 512, **engine_args})
    scheduler, preempted = llm.engine.scheduler, []
    schedule = scheduler.schedule
    scheduler.schedule = lambda: (lambda batch: preempted.extend(batch.preempted) or batch)(schedule())
    assert generate(llm, prompts) == expected
    assert bool(preempted) == (engine_args.get("num_kv_blocks") == 100)
    replays = llm.engine.executor.replays
    assert replays["mixed"] > 0 and replays["decode"] > 0 and llm.engine.executor.num_eager_steps == 0
    assert llm.engine.block_manager.num_free_blocks == llm.engine.num_kv_blocks


def test_prefix_hits_through_the_layout(checkpoint, want):
    """The second call finds every prompt's full blocks cached: its pieces start after the cached prefix."""
    prompts, expected = want
    llm = LLM(str(checkpoint), skip_tokenizer_init=True, device="cpu", block_size=4, max_model_len=512,
              num_kv_blocks=512, enable_prefix_caching=True, async_scheduling=True)
    assert generate(llm, prompts) == expected
    assert generate(llm, prompts) == expected
    assert llm.engine.block_manager.hit_tokens > 400


def test_shared_prefix_decodes_take_the_cascade(checkpoint):
    """Sixteen sequences behind one cached prefix: their decode steps replay the cascade variant, same tokens."""
    g = torch.Generator().manual_seed(9)
    prefix = torch.randint(0, 512, (24,), generator=g).tolist()
    prompts = [prefix + torch.randint(0, 512, (3,), generator=g).tolist() for _ in range(16)]
    model = hf_model(checkpoint)
    expected = [hf_greedy(model, p, 4) for p in prompts]
    llm = LLM(str(checkpoint), skip_tokenizer_init=True, device="cpu", block_size=4, max_model_len=512,
              num_kv_blocks=512, max_num_seqs=16, enable_prefix_caching=True)
    llm.generate([{"prompt_token_ids": prompts[0]}], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(temperature=0, max_tokens=4),
                        use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert llm.engine.executor.replays["cascade"] > 0


def test_logprobs_and_prompt_logprobs_through_the_layout(checkpoint, monkeypatch):
    """Steps that need every prompt row's logits go through the layout too when they fit; values match the plain engine."""
    g = torch.Generator().manual_seed(8)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (3, 5, 2)]
    params = SamplingParams(temperature=0, max_tokens=4, logprobs=2, prompt_logprobs=2)
    runs = {}
    for layout in (False, True):
        if not layout:
            monkeypatch.undo()  # the plain runner of chapter 07
        llm = LLM(str(checkpoint), skip_tokenizer_init=True, device="cpu", block_size=4, max_model_len=512,
                  num_kv_blocks=64, enable_prefix_caching=False)
        runs[layout] = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        if layout:
            assert llm.engine.executor.replays["mixed"] > 0
        monkeypatch.setattr(selector, "build_executor", graph_executor)
    for plain, through in zip(runs[False], runs[True]):
        assert plain.outputs[0].token_ids == through.outputs[0].token_ids
        for a, b in zip(plain.prompt_logprobs[1:], through.prompt_logprobs[1:]):
            assert a.keys() == b.keys()
            assert all(abs(a[t].logprob - b[t].logprob) < 1e-4 for t in a)
        for a, b in zip(plain.outputs[0].logprobs, through.outputs[0].logprobs):
            assert a.keys() == b.keys()
