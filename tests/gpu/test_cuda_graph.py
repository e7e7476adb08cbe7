"""GraphRunner replay equals the eager forward for every variant; the engine with graphs + flash agrees with
transformers (CUDA only)."""
import pytest
import torch

pytestmark = pytest.mark.gpu

GPU_TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=128, vocab_size=512, max_position_embeddings=4096)


@pytest.fixture(scope="module")
def graph_runner(tmp_path_factory):
    """An engine's GraphRunner over a tiny bf16 model, its KV cache filled with random values."""
    pytest.importorskip("flash_attn")
    from nanoserve import LLM
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path_factory.mktemp("g") / "m", seed=0, **GPU_TINY)
    llm = LLM(str(path), flash4_compile="startup",
              skip_tokenizer_init=True, max_num_seqs=64, max_model_len=2048, max_num_batched_tokens=512,
              num_kv_blocks=200, async_scheduling=False)
    g = llm.engine.executor
    long = ["long-context decode"] if g.runner.backend.name == "flash4" else []  # chapter 19, with flash-attn-4
    assert type(g).__name__ == "GraphRunner" and [v.name for v in g.variants] == ["cascade", *long, "decode", "mixed"]
    g.runner.kv_cache.normal_()
    yield g
    llm.shutdown()


def replay_vs_eager(g, step, variant):
    """(graph logits, eager logits) of a step, asserting that `variant` replayed it."""
    before = dict(g.replays)
    with torch.no_grad():
        replayed = g.forward(step).float()
        eager = g.runner.forward(step).float()
    assert g.replays[variant] == before[variant] + 1
    return replayed, eager


def test_torch_backend_is_not_captured(graph_runner):
    from nanoserve.attention.torch_ref import TorchAttentionBackend
    from nanoserve.engine.graph_runner import GraphRunner

    runner = graph_runner.runner
    saved, runner.backend = runner.backend, TorchAttentionBackend()
    try:
        with pytest.raises(ValueError, match="cannot be captured"):
            GraphRunner(runner, graph_runner.variants)._capture()
    finally:
        runner.backend = saved


def test_decode_replay_equals_eager(graph_runner):
    from nanoserve.engine.model_runner import build_step_inputs

    block, max_len, vocab = 256, 1024, 512
    # sequence i reads blocks 1 + 4i .. 4 + 4i: 32 sequences need 129 blocks
    for n in (1, 3, 15, 29, 32):
        ctx = [(37 * i) % (max_len - 1) + 1 for i in range(n)]
        ctx[0] = max_len
        tables = [list(range(1 + 4 * i, 1 + 4 * i + -(-c // block))) for i, c in enumerate(ctx)]
        ids = torch.randint(0, vocab, (n,)).tolist()
        step = build_step_inputs([[i] for i in ids], [c - 1 for c in ctx], tables, [True] * n, block)
        replayed, eager = replay_vs_eager(graph_runner, step, "decode")
        torch.testing.assert_close(replayed, eager, atol=2e-2, rtol=2e-2)


def test_long_context_decode_replay_equals_eager(graph_runner):
    """On flash-attn-4, few lanes over long contexts replay chapter 19's flash-attn 2 graphs; short ones do not."""
    from nanoserve.engine.model_runner import build_step_inputs

    if graph_runner.runner.backend.name != "flash4":
        pytest.skip("the long-context decode graphs exist on the flash4 backend")
    block = 256
    for lanes, ctx in ((1, 2048), (3, 2048), (4, 2048)):
        tables = [list(range(1 + 8 * i, 1 + 8 * i + -(-ctx // block))) for i in range(lanes)]
        step = build_step_inputs([[5 + i] for i in range(lanes)], [ctx - 1] * lanes, tables, [True] * lanes, block)
        replayed, eager = replay_vs_eager(graph_runner, step, "long-context decode")
        torch.testing.assert_close(replayed, eager, atol=2e-2, rtol=2e-2)
    short = build_step_inputs([[5]], [1000], [[1, 2, 3, 4]], [True], block)
    assert graph_runner.plan(short)[0].name == "decode"


def test_too_large_a_step_runs_eagerly(graph_runner):
    from nanoserve.engine.model_runner import build_step_inputs

    step = build_step_inputs([[0]] * 65, [0] * 65, [[0]] * 65, [True] * 65, 256)
    assert graph_runner.plan(step) is None  # more lanes than max_num_seqs: no bucket
    long = build_step_inputs([list(range(600))], [0], [[1, 2, 3]], [True], 256)
    assert graph_runner.plan(long) is None  # more tokens than the budget


@pytest.mark.parametrize("enforce_eager", [False, True])
def test_engine_greedy_matches_transformers(tmp_path, enforce_eager):
    """Teacher-forced in bf16: every generated token is transformers' argmax or within a small logit margin."""
    pytest.importorskip("flash_attn")
    import transformers

    from nanoserve import LLM, SamplingParams
    from nanoserve.engine.selector import attention_backends
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", seed=0, **GPU_TINY)
    llm = LLM(str(path), flash4_compile="startup",
              skip_tokenizer_init=True, enforce_eager=enforce_eager, max_num_seqs=8, enable_prefix_caching=False,
              max_model_len=1024, gpu_memory_utilization=0.3)
    runner = llm.engine.executor
    assert type(runner).__name__ == ("ModelRunner" if enforce_eager else "GraphRunner")
    assert type(llm.engine.core).__name__ == "AsyncEngineCore"  # the CUDA default
    plain = runner if enforce_eager else runner.runner
    assert plain.backend.name == next(iter(attention_backends())) and plain.block_size == 256
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (5, 300, 17, 600)]
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    outs = llm.generate([dict(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    # short prompts alone: their first step is a prefill alone in a mixed-step graph (unless eager)
    solo = [llm.generate(dict(prompt_token_ids=p), params, use_tqdm=False)[0] for p in prompts[:3]]
    prompts, outs = prompts + prompts[:3], outs + solo
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16).cuda().eval()
    exact = total = 0
    for prompt, out in zip(prompts, outs):
        gen = out.outputs[0].token_ids
        assert len(gen) == 24
        ids = torch.tensor([prompt + gen], device="cuda")
        with torch.no_grad():
            logits = ref(ids, attention_mask=torch.ones_like(ids)).logits[0, len(prompt) - 1:-1].float()
        chosen = logits.gather(1, torch.tensor(gen, device="cuda")[:, None])[:, 0]
        best = logits.max(-1).values
        margin = 0.02 * (best - logits.min(-1).values)
        assert bool((chosen >= best - margin).all()), (chosen - best).tolist()
        exact += int((chosen == best).sum())
        total += len(gen)
    assert exact >= 0.8 * total
    if not enforce_eager:  # every step replays a decode graph or a mixed-step graph
        assert runner.num_eager_steps == 0 and runner.replays["decode"] and runner.replays["mixed"]


def test_async_scheduling_matches_the_synchronous_loop(tmp_path):
    """One step ahead changes no token: graph steps with head-graph sampling, graphs + the eager sampler."""
    pytest.importorskip("flash_attn")
    from nanoserve import LLM, SamplingParams
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", seed=1, **GPU_TINY)
    g = torch.Generator().manual_seed(1)
    prompts = [dict(prompt_token_ids=torch.randint(0, 512, (n,), generator=g).tolist()) for n in (7, 300, 40, 700, 3)]
    params = [SamplingParams(temperature=0, max_tokens=30, ignore_eos=True),
              SamplingParams(temperature=0.8, top_p=0.9, seed=5, max_tokens=25, ignore_eos=True),  # eager sampler
              SamplingParams(temperature=0, max_tokens=40, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=20, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=35, ignore_eos=True)]
    runs = {}
    for overlap in (False, True):
        # a 256-token budget chunks the long prompts, so decodes also run inside mixed steps
        llm = LLM(str(path), flash4_compile="startup",
                  skip_tokenizer_init=True, async_scheduling=overlap, max_num_seqs=8,
                  max_num_batched_tokens=256, max_model_len=1024, gpu_memory_utilization=0.3)
        assert llm.config.async_scheduling is overlap
        runs[overlap] = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        assert type(llm.engine.core).__name__ == ("AsyncEngineCore" if overlap else "EngineCore")
        assert llm.engine.executor.num_eager_steps == 0
        llm.engine.shutdown()
    assert runs[True] == runs[False]


def test_mixed_step_graph_replay_equals_eager(graph_runner):
    """Prefill and mixed steps replayed through the mixed-step variant (lanes + pieces) give the eager logits."""
    from nanoserve.engine.model_runner import build_step_inputs

    block = 256
    g = torch.Generator().manual_seed(2)
    ids = lambda n: torch.randint(0, 512, (n,), generator=g).tolist()  # noqa: E731
    cases = [([ids(9)], [0], [True]), ([ids(40)], [300], [True]), ([ids(70), ids(300)], [0, 0], [True, True]),
             ([[5], ids(200), [7]], [700, 0, 12], [True, False, True]), ([ids(512)], [0], [True]),
             ([[1], [2], ids(130), [3], ids(2), [4]], [5, 600, 0, 300, 260, 9], [True] * 6)]
    for chunks, starts, samples in cases:
        tables = [[1 + 3 * i, 2 + 3 * i, 3 + 3 * i][:-(-(s + len(c)) // block)] for i, (c, s) in
                  enumerate(zip(chunks, starts))]
        step = build_step_inputs(chunks, starts, tables, samples, block)
        replayed, eager = replay_vs_eager(graph_runner, step, "mixed")
        torch.testing.assert_close(replayed, eager, atol=2e-2, rtol=2e-2)


def test_mixed_step_graphs_greedy_is_within_bf16_noise_of_transformers(tmp_path):
    """Every token the engine picks through the mixed-step graphs is, teacher-forced, an fp32 argmax up to bf16 noise."""
    pytest.importorskip("flash_attn")
    transformers = pytest.importorskip("transformers")
    from nanoserve import LLM, SamplingParams
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", seed=2, tie_word_embeddings=False, **GPU_TINY)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (5, 300, 1, 130, 700, 64, 2, 40)]
    llm = LLM(str(path), flash4_compile="startup",
              skip_tokenizer_init=True, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=1024,
              gpu_memory_utilization=0.3)
    runner = llm.engine.executor
    eager_before = runner.num_eager_steps
    outs = llm.generate([dict(prompt_token_ids=p) for p in prompts],
                        SamplingParams(temperature=0, max_tokens=24, ignore_eos=True), use_tqdm=False)
    assert runner.num_eager_steps == eager_before and runner.replays["mixed"]  # every step replayed a graph
    llm.engine.shutdown()
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    worst = 0.0
    for prompt, out in zip(prompts, outs):
        ids = torch.tensor([prompt + list(out.outputs[0].token_ids)])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1:-1]
        chosen = logits.gather(1, torch.tensor(out.outputs[0].token_ids)[:, None])[:, 0]
        gap = (logits.max(-1).values - chosen) / logits.abs().max(-1).values.clamp(min=1)
        worst = max(worst, gap.max().item())
    assert worst < 0.03, f"a chosen token is {worst:.3f} (relative) below the fp32 argmax"


def test_cascade_graph_replay_equals_eager(graph_runner):
    """A decode step sharing prefix blocks gives the eager logits through the cascade variant, a non-member too."""
    from nanoserve.engine.model_runner import build_step_inputs

    block, cascade = 256, graph_runner.variants[0]
    saved, cascade.min_shared_reads = cascade.min_shared_reads, 0
    g = torch.Generator().manual_seed(4)
    try:
        for lanes, shared in ((16, 1), (40, 3), (64, 2)):
            lens = torch.randint(1, 2 * block, (lanes,), generator=g).tolist()
            tables = [[1 + j for j in range(shared)] + [10 + 2 * i, 11 + 2 * i][:-(-n // block)]
                      for i, n in enumerate(lens)]
            if lanes > 16:  # one lane with a private copy of the prefix: not a member, its whole context is its own
                tables[0] = [150 + j for j in range(shared)] + tables[0][shared:]
            starts = [shared * block + n - 1 for n in lens]
            step = build_step_inputs([[5 + i] for i in range(lanes)], starts, tables, [True] * lanes, block)
            assert cascade.plan(step).state[0] == shared
            replayed, eager = replay_vs_eager(graph_runner, step, "cascade")
            torch.testing.assert_close(replayed, eager, atol=3e-2, rtol=3e-2)
    finally:
        cascade.min_shared_reads = saved


@pytest.mark.parametrize("heads, dim, dtype", [(16, 128, torch.bfloat16), (9, 64, torch.float16),
                                                (4, 128, torch.float32)])
def test_cascade_merge_kernel_equals_the_torch_merge(heads, dim, dtype):
    """Chapter 13's one-launch merge equals the masked torch merge; a non-member row is exactly its own attention."""
    pytest.importorskip("triton")
    from nanoserve.attention.cascade import merge_attention, merge_members

    g, rows = torch.Generator(device="cuda").manual_seed(heads), 37
    out_a, out_b = (torch.randn(rows, heads, dim, device="cuda", generator=g).to(dtype) for _ in range(2))
    lse_a = (torch.randn(heads, rows, device="cuda", generator=g) * 4).t()  # transposed, as flash's varlen lse
    lse_b = torch.randn(rows, heads, device="cuda", generator=g) * 4
    members = (torch.arange(rows, device="cuda") % 3 != 0).int()
    got = merge_members(out_a, lse_a, out_b, lse_b, members)
    want = merge_attention(out_a.float(), lse_a.masked_fill(members[:, None] == 0, float("-inf")), out_b.float(), lse_b)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    assert got.dtype == dtype and torch.equal(got[members == 0], out_b[members == 0])


def test_shared_prefix_greedy_is_within_bf16_noise_through_the_cascade(tmp_path):
    """Greedy decoding of prompts sharing a long prefix goes through the cascade graphs and stays an fp32 argmax."""
    pytest.importorskip("flash_attn")
    transformers = pytest.importorskip("transformers")
    from nanoserve import LLM, SamplingParams
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", seed=5, tie_word_embeddings=False, **GPU_TINY)
    llm = LLM(str(path), flash4_compile="startup",
              skip_tokenizer_init=True, max_num_seqs=32, max_model_len=1024, gpu_memory_utilization=0.3)
    runner = llm.engine.executor
    runner.variants[0].min_shared_reads = 0  # a tiny batch: take the cascade whenever a block is shared
    g = torch.Generator().manual_seed(6)
    prefix = torch.randint(0, 512, (512,), generator=g).tolist()
    prompts = [prefix + torch.randint(0, 512, (n,), generator=g).tolist() for n in range(3, 23)]
    llm.generate([dict(prompt_token_ids=prompts[0])], SamplingParams(max_tokens=1), use_tqdm=False)  # cache the prefix
    outs = llm.generate([dict(prompt_token_ids=p) for p in prompts],
                        SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)
    assert runner.replays["cascade"] > 0
    llm.engine.shutdown()
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    worst = 0.0
    for prompt, out in zip(prompts, outs):
        gen = list(out.outputs[0].token_ids)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + gen])).logits[0, len(prompt) - 1:-1]
        chosen = logits.gather(1, torch.tensor(gen)[:, None])[:, 0]
        gap = (logits.max(-1).values - chosen) / logits.abs().max(-1).values.clamp(min=1)
        worst = max(worst, gap.max().item())
    assert worst < 0.03, f"a chosen token is {worst:.3f} (relative) below the fp32 argmax"
