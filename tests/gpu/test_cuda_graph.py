"""CUDA-graph replay equals the eager forward; the engine with graphs + flash agrees with transformers (CUDA only)."""
import pytest
import torch

pytestmark = pytest.mark.gpu

GPU_TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=128, vocab_size=512, max_position_embeddings=4096)


@pytest.fixture(scope="module")
def tiny_model():
    pytest.importorskip("flash_attn")
    from nanoserve.model.qwen3 import Qwen3ForCausalLM
    from nanoserve.model.tiny import tiny_qwen3_config

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(tiny_qwen3_config(**GPU_TINY)).to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    return model.eval()


def random_paged_caches(model, num_blocks, block=256, device="cuda"):
    """Per-layer (k, v) paged caches of random bf16 values for `model`'s KV heads (head_dim 128)."""
    from nanoserve.attention.batch import allocate_kv_cache

    cfg = model.config
    _, caches = allocate_kv_cache(cfg.num_hidden_layers, num_blocks, block, cfg.num_key_value_heads, 128,
                                  dtype=torch.bfloat16, device=device)
    for k, v in caches:
        k.normal_(), v.normal_()
    return caches


def test_torch_backend_is_not_captured(tiny_model):
    from nanoserve.attention.batch import allocate_kv_cache
    from nanoserve.attention.torch_ref import TorchAttentionBackend
    from nanoserve.engine.cuda_graph import DecodeGraphs

    _, caches = allocate_kv_cache(2, 4, 256, 2, 128, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="cannot be captured"):
        DecodeGraphs(tiny_model, caches, TorchAttentionBackend(), [1, 2], 512, 256)


@pytest.mark.parametrize("backend_name", ["flash"])
def test_replay_equals_eager(tiny_model, backend_name):
    from nanoserve.attention.batch import allocate_kv_cache, build_attention_batch
    from nanoserve.engine.selector import backend_class
    from nanoserve.engine.cuda_graph import DecodeGraphs, decode_buckets
    from nanoserve.engine.model_runner import build_step_inputs

    backend, block, max_len = backend_class(backend_name)(), 256, 1024
    cfg = tiny_model.config
    # sequence i reads blocks 1 + 4i .. 4 + 4i: 32 sequences need 129 blocks (an index past the cache
    # reads whatever memory follows it, which the replay itself may be writing)
    _, caches = allocate_kv_cache(cfg.num_hidden_layers, 4 * 32 + 1, block, cfg.num_key_value_heads, 128,
                                  dtype=torch.bfloat16, device="cuda")
    for k, v in caches:
        k.normal_(), v.normal_()
    graphs = DecodeGraphs(tiny_model, caches, backend, decode_buckets(32), max_len, block)
    for n in (1, 3, 16, 29, 32):
        ctx = [(37 * i) % (max_len - 1) + 1 for i in range(n)]
        ctx[0] = max_len  # a sequence at the very end of its context: the table fills the captured width
        tables = [list(range(1 + 4 * i, 1 + 4 * i + -(-c // block))) for i, c in enumerate(ctx)]
        ids = torch.randint(0, cfg.vocab_size, (n,))
        pos = torch.tensor(ctx) - 1
        step = build_step_inputs([[i] for i in ids.tolist()], pos.tolist(), tables, [True] * n, block)
        with torch.no_grad():
            batch = build_attention_batch(tables, ctx, [1] * n, block, caches, backend, device="cuda")
            eager = tiny_model(ids.cuda(), pos.cuda(), batch).float()
            replayed = graphs.replay(step)
        torch.testing.assert_close(replayed.float(), eager, atol=2e-2, rtol=2e-2)


def test_too_large_batch_is_refused(tiny_model):
    from nanoserve.attention.batch import allocate_kv_cache
    from nanoserve.attention.flash import FlashAttentionBackend
    from nanoserve.engine.cuda_graph import DecodeGraphs
    from nanoserve.engine.model_runner import build_step_inputs

    _, caches = allocate_kv_cache(2, 4, 256, 2, 128, dtype=torch.bfloat16, device="cuda")
    graphs = DecodeGraphs(tiny_model, caches, FlashAttentionBackend(), [1, 2], 512, 256)
    assert graphs.can_replay(2) and not graphs.can_replay(3)
    with pytest.raises(ValueError, match="bucket"):
        graphs.replay(build_step_inputs([[0]] * 3, [0] * 3, [[0]] * 3, [True] * 3, 256))


@pytest.mark.parametrize("enforce_eager", [False, True])
def test_engine_greedy_matches_transformers(tmp_path, enforce_eager):
    """Teacher-forced in bf16: every generated token is transformers' argmax or within a small logit margin."""
    pytest.importorskip("flash_attn")
    import transformers

    from nanoserve import LLM, SamplingParams
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", seed=0, **GPU_TINY)
    llm = LLM(str(path), skip_tokenizer_init=True, enforce_eager=enforce_eager, max_num_seqs=8, enable_prefix_caching=False,
              max_model_len=1024, gpu_memory_utilization=0.3)
    runner = llm.engine.executor
    assert type(runner).__name__ == ("FusedEagerModelRunner" if enforce_eager else "AsyncModelRunner")  # async: CUDA default
    assert runner.backend.name == "flash" and runner.block_size == 256
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
        assert runner.num_eager_steps == 0


def test_async_scheduling_matches_the_synchronous_loop(tmp_path):
    """One step ahead changes no token: graph steps, graph forward + eager sampler, and eager mixed steps."""
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
        # a 256-token budget chunks the long prompts, so decodes also run inside eager mixed steps
        llm = LLM(str(path), skip_tokenizer_init=True, async_scheduling=overlap, max_num_seqs=8,
                  max_num_batched_tokens=256, max_model_len=1024, gpu_memory_utilization=0.3)
        assert llm.config.async_scheduling is overlap
        if overlap:  # the mixed-step graphs compute prefills in another order (bf16 rounding): compared below
            llm.engine.executor.mixed_graphs = None
        runs[overlap] = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        assert type(llm.engine.executor).__name__ == ("AsyncModelRunner" if overlap else "CudaGraphModelRunner")
        llm.engine.shutdown()
    assert runs[True] == runs[False]


def test_mixed_step_graph_replay_equals_eager(tiny_model):
    """Prefill and mixed steps replayed from MixedStepGraphs (lanes + pieces) give the eager forward's logits."""
    from nanoserve.engine.selector import backend_class
    from nanoserve.engine.prefill_graph import MixedStepGraphs
    from nanoserve.engine.model_runner import build_step_inputs, pack_to_device
    from nanoserve.attention.batch import AttentionBatch

    backend, block, max_len = backend_class("flash")(), 256, 1024
    cfg = tiny_model.config
    caches = random_paged_caches(tiny_model, 20, block)
    last = torch.zeros(8, dtype=torch.int64, device="cuda")
    graphs = MixedStepGraphs(tiny_model, caches, backend, max_len, block, last, max_seqs=8,
                             buckets=(16, 64, 512))
    g = torch.Generator().manual_seed(2)
    ids = lambda n: torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist()  # noqa: E731
    cases = [([ids(9)], [0], [True]), ([ids(40)], [300], [True]), ([ids(70), ids(300)], [0, 0], [True, True]),
             ([[5], ids(200), [7]], [700, 0, 12], [True, False, True]), ([ids(512)], [0], [True]),
             ([[1], [2], ids(130), [3], ids(2), [4]], [5, 600, 0, 300, 260, 9], [True] * 6)]
    for chunks, starts, samples in cases:
        tables = [[1 + 3 * i, 2 + 3 * i, 3 + 3 * i][:-(-(s + len(c)) // block)] for i, (c, s) in
                  enumerate(zip(chunks, starts))]
        step = build_step_inputs(chunks, starts, tables, samples, block)
        assert graphs.bucket_for(step) is not None
        with torch.no_grad():
            replayed = graphs.replay(step).float()
            (input_ids, positions, slots, rows, cu_q, cu_k, ctx, tbl) = pack_to_device(
                [step.input_ids, step.positions, step.slot_mapping, step.logits_indices, step.cu_seqlens_q,
                 step.cu_seqlens_k, step.context_lens, step.block_tables], torch.device("cuda"))
            batch = AttentionBatch(slots, cu_q, cu_k, step.max_seqlen_q, step.max_seqlen_k, ctx, tbl, caches,
                                   backend, is_decode=False)
            eager = tiny_model.compute_logits(tiny_model(input_ids, positions, batch)[rows]).float()
        torch.testing.assert_close(replayed, eager, atol=2e-2, rtol=2e-2)
    too_long = build_step_inputs([ids(600)], [0], [[1, 2, 3]], [True], block)
    assert graphs.bucket_for(too_long) is None
    with pytest.raises(ValueError, match="mixed-step graph"):
        graphs.replay(too_long)


def test_mixed_step_graphs_greedy_is_within_bf16_noise_of_transformers(tmp_path):
    """Every token the engine picks through the mixed-step graphs is, teacher-forced, an fp32 argmax up to bf16 noise."""
    pytest.importorskip("flash_attn")
    transformers = pytest.importorskip("transformers")
    from nanoserve import LLM, SamplingParams
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", seed=2, tie_word_embeddings=False, **GPU_TINY)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (5, 300, 1, 130, 700, 64, 2, 40)]
    llm = LLM(str(path), skip_tokenizer_init=True, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=1024,
              gpu_memory_utilization=0.3)
    runner = llm.engine.executor
    assert runner.mixed_graphs is not None and runner.mixed_graphs.graphs
    eager_before = runner.num_eager_steps
    outs = llm.generate([dict(prompt_token_ids=p) for p in prompts],
                        SamplingParams(temperature=0, max_tokens=24, ignore_eos=True), use_tqdm=False)
    assert runner.num_eager_steps == eager_before  # every step replayed a graph
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


def test_cascade_graph_replay_equals_the_plain_graph(tiny_model):
    """A decode step sharing prefix blocks gives the same hidden states through the cascade graph as through the plain one."""
    from nanoserve.engine.cascade import CascadeDecodeGraphs
    from nanoserve.engine.cuda_graph import decode_buckets
    from nanoserve.engine.model_runner import build_step_inputs
    from nanoserve.engine.selector import backend_class

    backend, block, max_len = backend_class("flash")(), 256, 2048
    caches = random_paged_caches(tiny_model, 160, block)
    graphs = CascadeDecodeGraphs(tiny_model, caches, backend, decode_buckets(64), max_len, block, "cuda")
    graphs.min_shared_reads = 0
    assert sorted(graphs.cascade_graphs) == [b for b in graphs.buckets if b >= 16]
    g = torch.Generator().manual_seed(4)
    for lanes, shared in ((16, 1), (40, 3), (64, 2)):
        lens = torch.randint(1, 2 * block, (lanes,), generator=g).tolist()
        tables = [[1 + j for j in range(shared)] + [10 + 2 * i, 11 + 2 * i][:-(-n // block)] for i, n in enumerate(lens)]
        if lanes > 16:  # one lane with a private copy of the prefix: not a member, its whole context is its own
            tables[0] = [120 + j for j in range(shared)] + tables[0][shared:]
        starts = [shared * block + n - 1 for n in lens]
        step = build_step_inputs([[5 + i] for i in range(lanes)], starts, tables, [True] * lanes, block)
        with torch.no_grad():
            graphs.cascade_graphs, saved = {}, graphs.cascade_graphs
            plain = graphs.replay(step).float().clone()
            graphs.cascade_graphs = saved
            cascade_steps = graphs.num_cascade_steps
            merged = graphs.replay(step).float()
        assert graphs.shared_blocks == shared and graphs.num_cascade_steps == cascade_steps + 1
        assert graphs.members[:lanes].tolist() == [int(lanes == 16)] + [1] * (lanes - 1)
        torch.testing.assert_close(merged, plain, atol=3e-2, rtol=3e-2)


def test_shared_prefix_greedy_is_within_bf16_noise_through_the_cascade(tmp_path):
    """Greedy decoding of prompts sharing a long prefix goes through the cascade graphs and stays an fp32 argmax."""
    pytest.importorskip("flash_attn")
    transformers = pytest.importorskip("transformers")
    from nanoserve import LLM, SamplingParams
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", seed=5, tie_word_embeddings=False, **GPU_TINY)
    llm = LLM(str(path), skip_tokenizer_init=True, max_num_seqs=32, max_model_len=1024, gpu_memory_utilization=0.3)
    graphs = llm.engine.executor.graphs
    graphs.min_shared_reads = 0  # a tiny batch: take the cascade whenever a block is shared
    g = torch.Generator().manual_seed(6)
    prefix = torch.randint(0, 512, (512,), generator=g).tolist()
    prompts = [prefix + torch.randint(0, 512, (n,), generator=g).tolist() for n in range(3, 23)]
    llm.generate([dict(prompt_token_ids=prompts[0])], SamplingParams(max_tokens=1), use_tqdm=False)  # cache the prefix
    outs = llm.generate([dict(prompt_token_ids=p) for p in prompts],
                        SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)
    assert graphs.num_cascade_steps > 0
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
