"""Repetition, presence and frequency penalties: transformers' repetition penalty token for token, the others by formula."""
from importlib.util import find_spec

import pytest
import torch
from hf_reference import hf_greedy, hf_model

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams
from nanoserve.logits_processors import Penalties
from nanoserve.sampler import SamplingBatch, apply_processors

# chapter 11's AsyncEngineCore runs these loops one step ahead; until it is exported only the sync loop runs
ASYNC = pytest.param(True, marks=pytest.mark.skipif(find_spec("nanoserve.engine.async_core") is None,
                                                     reason="nanoserve.engine.async_core is not exported yet"))

LOOPS = pytest.mark.parametrize("overlap", [False, ASYNC], ids=["sync", "async"])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # a tied head makes random-weight greedy output repeat prompt tokens: exactly what penalties change
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=7, max_position_embeddings=128)


@pytest.fixture(scope="module")
def hf(checkpoint):
    return hf_model(checkpoint)


def llm_of(checkpoint, overlap):
    return LLM(str(checkpoint), device="cpu", dtype="float32", skip_tokenizer_init=True, block_size=4,
               num_kv_blocks=64, async_scheduling=overlap)


def reference_greedy(hf, prompt, n, presence, frequency):
    """Greedy decoding with presence/frequency penalties applied by hand to transformers' logits."""
    tokens = list(prompt)
    for _ in range(n):
        with torch.no_grad():
            logits = hf(torch.tensor([tokens])).logits[0, -1].float()
        out = tokens[len(prompt):]
        counts = torch.bincount(torch.tensor(out, dtype=torch.int64), minlength=logits.numel()).float() \
            if out else torch.zeros_like(logits)
        tokens.append(int((logits - frequency * counts - presence * (counts > 0)).argmax()))
    return tokens[len(prompt):]


@LOOPS
def test_repetition_penalty_equals_transformers(checkpoint, hf, overlap):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (4, 9, 15)]
    plain = SamplingParams(temperature=0, max_tokens=10)
    penalised = SamplingParams(temperature=0, max_tokens=10, repetition_penalty=1.8)
    outs = llm_of(checkpoint, overlap).generate([{"prompt_token_ids": p} for p in prompts],
                                                [penalised, plain, penalised], use_tqdm=False)
    got = [o.outputs[0].token_ids for o in outs]
    assert got[0] == hf_greedy(hf, prompts[0], 10, repetition_penalty=1.8)
    assert got[1] == hf_greedy(hf, prompts[1], 10)  # its batch mates' penalties do not touch it
    assert got[2] == hf_greedy(hf, prompts[2], 10, repetition_penalty=1.8)
    assert got[0] != hf_greedy(hf, prompts[0], 10), "the penalty was meant to change this output"


@LOOPS
def test_presence_and_frequency_penalties(checkpoint, hf, overlap):
    prompt = torch.randint(0, 512, (6,), generator=torch.Generator().manual_seed(2)).tolist()
    for presence, frequency in ((1.5, 0.0), (0.0, 1.2), (0.5, 0.5)):
        params = SamplingParams(temperature=0, max_tokens=12, presence_penalty=presence, frequency_penalty=frequency)
        out = llm_of(checkpoint, overlap).generate({"prompt_token_ids": prompt}, params, use_tqdm=False)
        assert out[0].outputs[0].token_ids == reference_greedy(hf, prompt, 12, presence, frequency)


def apply_penalties(logits, params, prompt_ids, output_ids):
    """`logits` after the Penalties processor, through chapter 06's seam."""
    sampling = SamplingBatch(params, [None] * len(params), prompt_token_ids=prompt_ids, output_token_ids=output_ids,
                             processors=[Penalties()])
    return apply_processors(logits, sampling)


def test_apply_penalties_by_hand():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0], [1.0, 1.0, 1.0, 1.0]])
    params = [SamplingParams(repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25),
              SamplingParams()]
    out = apply_penalties(logits, params, prompt_ids=[[0], [0]], output_ids=[[1, 1, 3], [2]])
    # token 0: in the prompt, positive -> /2; token 1: twice in the output, negative -> *2, -0.5, -2*0.25
    assert out[0].tolist() == [1.0, -2.0 - 0.5 - 0.5, 0.5, 3.0 / 2 - 0.5 - 0.25]
    assert out[1].tolist() == [1.0, 1.0, 1.0, 1.0]  # no penalties asked: untouched


@pytest.mark.parametrize("kwargs", [dict(repetition_penalty=0), dict(repetition_penalty=float("inf")),
                                    dict(presence_penalty=2.5), dict(frequency_penalty=-3)])
def test_bad_penalties_are_refused(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SamplingParams(**kwargs)
