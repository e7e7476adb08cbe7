"""Chapter 10's one-pass sampler on CUDA: greedy rows equal argmax at Qwen3's vocabulary, temperature rows follow the
softmax, replays inside a graph draw anew, and an engine's head graphs use it with the same seed giving the same
tokens (CUDA only)."""
import pytest
import torch

pytestmark = pytest.mark.gpu

VOCAB = 151936  # Qwen3's: 19 chunks of 8,192 columns, the last one partly outside


@pytest.fixture(scope="module")
def sampling():
    pytest.importorskip("triton")
    from nanoserve.kernels import sampling

    return sampling


@pytest.mark.parametrize("rows", [1, 7, 256])
def test_greedy_rows_equal_argmax(sampling, rows):
    torch.manual_seed(rows)
    logits = torch.randn(rows, VOCAB, device="cuda").to(torch.bfloat16)
    logits[0, 9000] = logits[0, 150000] = logits[0].max() + 1  # equal maxima in two chunks: the first wins
    greedy = torch.ones(rows, dtype=torch.int32, device="cuda")
    got = sampling.sample_rows(logits, torch.ones(rows, device="cuda"), greedy)
    assert torch.equal(got, logits.argmax(dim=1)) and got[0] == 9000


def test_temperature_rows_follow_the_softmax(sampling):
    torch.manual_seed(0)
    row = torch.full((VOCAB,), -30.0, device="cuda")
    hot = torch.tensor([3, 8191, 8192, 70000, 151935], device="cuda")  # chunk edges and the last column
    row[hot] = torch.tensor([1.0, 0.5, 0.0, -0.5, 1.5], device="cuda")
    n, temperature = 20_000, 0.7  # more than 2^31 elements (64-bit row offsets), fewer than 2^32 (distinct counters)
    logits = row.to(torch.bfloat16).repeat(n, 1)
    drawn = sampling.sample_rows(logits, torch.full((n,), temperature, device="cuda"),
                                 torch.zeros(n, dtype=torch.int32, device="cuda"))
    want = (row.to(torch.bfloat16).float() / temperature).softmax(dim=0)[hot]
    counts = torch.stack([(drawn == t).sum() for t in hot]).float()
    assert counts.sum() >= n - 5  # the other 151,931 tokens hold about 1e-16 of the mass
    chi2 = float(((counts - n * want) ** 2 / (n * want)).sum())
    assert chi2 < 18.5, (counts.tolist(), (n * want).tolist())  # 4 degrees of freedom: p < 0.001 by chance


def test_graph_replays_draw_anew_and_a_seed_repeats(sampling):
    logits = torch.zeros(64, VOCAB, device="cuda", dtype=torch.bfloat16)  # uniform: any token may win
    temps, greedy = torch.ones(64, device="cuda"), torch.zeros(64, dtype=torch.int32, device="cuda")
    out = torch.zeros(64, dtype=torch.int64, device="cuda")

    def draws(seed):
        generator = torch.Generator(device="cuda").manual_seed(seed)
        fn = lambda: out.copy_(sampling.sample_rows(logits, temps, greedy, generator))  # noqa: E731
        fn()  # compile outside the capture
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(generator)
        with torch.cuda.graph(graph):
            fn()
        generator.manual_seed(seed)
        result = []
        for _ in range(3):
            graph.replay()
            result.append(out.clone())
        return result

    first, again = draws(7), draws(7)
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_engine_head_graphs_sample_in_one_kernel_and_repeat_with_a_seed(tmp_path):
    pytest.importorskip("flash_attn")
    pytest.importorskip("triton")
    from nanoserve import LLM, SamplingParams
    from nanoserve.kernels.sampling import sample_rows
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", seed=0, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=128, vocab_size=512,
                                max_position_embeddings=4096)
    prompts = [{"prompt_token_ids": [(7 * i + 3 * j) % 500 + 1 for j in range(20 + i)]} for i in range(6)]
    params = SamplingParams(temperature=0.9, max_tokens=24, ignore_eos=True)
    outputs = []
    for _ in range(2):
        llm = LLM(str(path), flash4_compile="startup", skip_tokenizer_init=True, max_num_seqs=16, max_model_len=512,
                  seed=11)
        assert llm.engine.executor.head_sampler is sample_rows
        replays = sum(llm.engine.executor.replays.values())
        outputs.append([o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)])
        assert sum(llm.engine.executor.replays.values()) > replays + 20  # decode steps replayed, sampled in graphs
        llm.shutdown()
    assert outputs[0] == outputs[1]
    assert len({tuple(t) for t in outputs[0]}) > 1
