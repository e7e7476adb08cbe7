"""An executor that samples inside its own step (CUDA graphs, chapter 09) changes no engine output."""
import pytest
import torch

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams
from nanoserve.sampler import Sampler, SamplerOutput


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=5, tie_word_embeddings=False,
                                max_position_embeddings=128)


def _llm(checkpoint, overlap=False):
    return LLM(str(checkpoint), skip_tokenizer_init=True, device="cpu", dtype="float32", max_model_len=128,
               num_kv_blocks=64, block_size=4, max_num_seqs=8, max_num_batched_tokens=32,
               async_scheduling=overlap)


LOOPS = pytest.mark.parametrize("overlap", [False, True], ids=["sync", "async"])


PARAMS = [SamplingParams(temperature=0, max_tokens=9, ignore_eos=True),
          SamplingParams(temperature=0.7, max_tokens=7, ignore_eos=True),
          SamplingParams(temperature=1.2, max_tokens=12, ignore_eos=True),
          SamplingParams(temperature=0.8, top_p=0.9, max_tokens=6, ignore_eos=True),  # filter: eager path
          SamplingParams(temperature=0.9, seed=11, max_tokens=8, ignore_eos=True),  # own seed: eager path
          SamplingParams(temperature=0.6, min_tokens=3, max_tokens=8, stop_token_ids=[7]),  # bans first
          SamplingParams(n=2, temperature=0.5, max_tokens=5, ignore_eos=True)]


@LOOPS
def test_fused_sampling_changes_nothing(checkpoint, overlap):
    g = torch.Generator().manual_seed(0)
    prompts = [{"prompt_token_ids": torch.randint(0, 512, (int(n),), generator=g).tolist()}
               for n in torch.randint(1, 20, (len(PARAMS),), generator=g)]
    plain = _llm(checkpoint, overlap).generate(prompts, PARAMS, use_tqdm=False)

    fused_llm = _llm(checkpoint, overlap)
    runner, calls = fused_llm.engine.executor, []
    full_run = runner.run

    def run(step, sampling):
        """What a graph runner does when every row is plain: the lean sampler, from the runner's stream."""
        if sampling.temperatures is None:
            return full_run(step, sampling)
        calls.append(len(sampling.temperatures))
        logits = runner.forward(step)
        tokens = Sampler(runner.generator)(logits, [SamplingParams(temperature=t) for t in sampling.temperatures])
        return SamplerOutput(tokens)

    runner.run = run  # both cores run each prepared step through it
    fused = fused_llm.generate(prompts, PARAMS, use_tqdm=False)
    assert calls, "the engine never offered a plain step (sampling.temperatures) to the executor"
    assert [[c.token_ids for c in o.outputs] for o in fused] == [[c.token_ids for c in o.outputs] for o in plain]
    assert [[c.finish_reason for c in o.outputs] for o in fused] == [[c.finish_reason for c in o.outputs] for o in plain]


@LOOPS
def test_step_deltas_and_generate_agree(checkpoint, overlap):
    """generate's lean loop (final outputs only) returns what merging step() deltas returns."""
    prompts = [{"prompt_token_ids": [3, 4, 5, 6]}, {"prompt_token_ids": [9] * 11}]
    params = [SamplingParams(temperature=0, max_tokens=6, stop_token_ids=[1, 2, 3]),
              SamplingParams(n=3, temperature=0.9, max_tokens=8, ignore_eos=True)]
    lean = _llm(checkpoint, overlap).generate(prompts, params, use_tqdm=False)
    llm = _llm(checkpoint, overlap)
    ids = [llm.engine.add_request(None, p, sp, stream_text=False) for p, sp in zip(prompts, params)]
    merged = {}
    while llm.engine.has_unfinished_requests():
        for d in llm.engine.step():
            if d.request_id in merged:
                merged[d.request_id].merge(d)
            else:
                merged[d.request_id] = d
    assert [merged[i] for i in ids] == lean
