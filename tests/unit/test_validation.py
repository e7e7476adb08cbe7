"""Bad input is rejected at the door with a clear ValueError/TypeError; the engine stays usable."""
import pytest
import torch

from nanoserve.engine.config import EngineConfig
from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

BAD_PARAMS = [
    (dict(temperature=-0.1), ValueError, "temperature"),
    (dict(temperature="hot"), TypeError, "temperature"),
    (dict(temperature=float("inf")), ValueError, "temperature"),
    (dict(top_p=0.0), ValueError, "top_p"),
    (dict(top_p=1.5), ValueError, "top_p"),
    (dict(top_k=-2), ValueError, "top_k"),
    (dict(top_k=2.5), TypeError, "top_k"),
    (dict(min_p=-0.1), ValueError, "min_p"),
    (dict(min_p=1.1), ValueError, "min_p"),
    (dict(max_tokens=0), ValueError, "max_tokens"),
    (dict(max_tokens=True), TypeError, "max_tokens"),
    (dict(min_tokens=-1), ValueError, "min_tokens"),
    (dict(min_tokens=5, max_tokens=4), ValueError, "min_tokens"),
    (dict(n=0), ValueError, "n must"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(seed="1"), TypeError, "seed"),
    (dict(stop=3), TypeError, "stop"),
    (dict(stop=["ok", 3]), TypeError, "stop"),
    (dict(stop=""), ValueError, "stop"),
    (dict(stop_token_ids=[1, "2"]), TypeError, "stop_token_ids"),
    (dict(stop_token_ids=[-1]), ValueError, "stop_token_ids"),
    (dict(stop_token_ids=5), TypeError, "stop_token_ids"),
    (dict(ignore_eos=1), TypeError, "ignore_eos"),
]


@pytest.mark.parametrize("kwargs,error,field", BAD_PARAMS, ids=[str(k) for k, _, _ in BAD_PARAMS])
def test_bad_sampling_params(kwargs, error, field):
    with pytest.raises(error, match=field):
        SamplingParams(**kwargs)


def test_good_sampling_params_are_normalised():
    p = SamplingParams(stop="###", stop_token_ids=(3, 4), top_k=-1, temperature=0)
    assert p.stop == ["###"] and p.stop_token_ids == [3, 4] and p.greedy
    assert SamplingParams().stop == [] and not SamplingParams().greedy


BAD_CONFIGS = [
    (dict(device="tpu"), ValueError, "device"),
    (dict(device=3), TypeError, "device"),
    (dict(dtype="float8"), ValueError, "dtype"),
    (dict(dtype=torch.int8), ValueError, "dtype"),
    (dict(max_num_seqs=0), ValueError, "max_num_seqs"),
    (dict(max_num_batched_tokens=0), ValueError, "max_num_batched_tokens"),
    (dict(block_size=0), ValueError, "block_size"),
    (dict(num_kv_blocks=-3), ValueError, "num_kv_blocks"),
    (dict(max_model_len=1.5), TypeError, "max_model_len"),
    (dict(gpu_memory_utilization=1.5), ValueError, "gpu_memory_utilization"),
    (dict(tensor_parallel_size=0), ValueError, "tensor_parallel_size"),
    (dict(attention_backend="xformers"), ValueError, "attention_backend"),
    (dict(enable_prefix_caching="yes"), TypeError, "enable_prefix_caching"),
    (dict(async_scheduling="on"), TypeError, "async_scheduling"),
]


@pytest.mark.parametrize("kwargs,error,field", BAD_CONFIGS, ids=[str(k) for k, _, _ in BAD_CONFIGS])
def test_bad_engine_config(kwargs, error, field):
    with pytest.raises(error, match=field):
        EngineConfig(model="somewhere", **kwargs)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), max_position_embeddings=64)


def test_config_checked_against_the_model(checkpoint):
    with pytest.raises(ValueError, match="max_position_embeddings"):
        LLM(checkpoint, skip_tokenizer_init=True, max_model_len=65)
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        LLM(checkpoint, skip_tokenizer_init=True, tensor_parallel_size=3)  # 4 heads, 2 kv heads
    with pytest.raises(ValueError, match="async_scheduling"):
        LLM(checkpoint, skip_tokenizer_init=True, device="cpu", tensor_parallel_size=2, async_scheduling=True)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="flash"):
            LLM(checkpoint, skip_tokenizer_init=True, attention_backend="flash")
        with pytest.raises(ValueError, match="CUDA"):
            LLM(checkpoint, skip_tokenizer_init=True, device="cuda")


def test_a_step_budget_below_max_num_seqs_is_refused_as_vllm_refuses_it(checkpoint):
    with pytest.raises(ValueError, match=r"^max_num_batched_tokens \(1\) must be greater than or equal to "
                                         r"max_num_seqs \(256\)\.$"):
        LLM(checkpoint, skip_tokenizer_init=True, device="cpu", max_num_batched_tokens=1)
    with pytest.raises(ValueError, match=r"max_num_batched_tokens \(7\) .* max_num_seqs \(8\)"):
        LLM(checkpoint, skip_tokenizer_init=True, device="cpu", max_num_batched_tokens=7, max_num_seqs=8)
    # equal is enough, and the default budget follows a large max_num_seqs
    llm = LLM(checkpoint, skip_tokenizer_init=True, device="cpu", num_kv_blocks=8, block_size=4,
              max_num_batched_tokens=8, max_num_seqs=8)
    assert llm.config.max_num_batched_tokens == 8
    cfg = EngineConfig(checkpoint, device="cpu", max_num_seqs=10_000).resolve(llm.engine.model_config)
    assert cfg.max_num_batched_tokens == 10_000


def test_missing_model_path(tmp_path):
    with pytest.raises(ValueError, match="cannot find model|config.json"):
        LLM(str(tmp_path / "nope"), skip_tokenizer_init=True)


@pytest.fixture(scope="module")
def llm(checkpoint):
    return LLM(checkpoint, skip_tokenizer_init=True, block_size=4, num_kv_blocks=8, max_model_len=48,
               enable_prefix_caching=True)


GREEDY = SamplingParams(temperature=0, max_tokens=4)
BAD_REQUESTS = [
    ("", ValueError, "tokenizer"),
    ("hello", ValueError, "tokenizer"),
    ({"prompt_token_ids": []}, ValueError, "empty"),
    ({"prompt_token_ids": [1, 2.0]}, TypeError, "ints"),
    ({"prompt_token_ids": [1, True]}, TypeError, "ints"),
    ({"prompt_token_ids": [1, 512]}, ValueError, "vocabulary"),
    ({"prompt_token_ids": [-1]}, ValueError, "non-negative"),
    ({"prompt_token_ids": "1 2 3"}, TypeError, "list of ints"),
    ({"prompt_ids": [1]}, ValueError, "unknown prompt keys"),
    ({"prompt_token_ids": list(range(48))}, ValueError, "max_model_len"),
    ([1, 2, 600], ValueError, "vocabulary"),  # a bare list of ids is one tokenized prompt, checked as such
    (42, TypeError, "prompt must be"),
]


@pytest.mark.parametrize("prompt,error,what", BAD_REQUESTS, ids=[repr(p)[:30] for p, _, _ in BAD_REQUESTS])
def test_bad_requests_leave_the_engine_usable(llm, prompt, error, what):
    good = {"prompt_token_ids": [5, 6, 7]}
    want = llm.generate(good, GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    with pytest.raises(error, match=what):
        llm.generate([good, prompt], GREEDY, use_tqdm=False)  # the good one must not be left queued
    assert not llm.engine.has_unfinished_requests()
    assert llm.generate(good, GREEDY, use_tqdm=False)[0].outputs[0].token_ids == want
    assert llm.engine.block_manager.num_free_blocks == 8


def test_params_list_must_match_prompts(llm):
    with pytest.raises(ValueError, match="2 prompts"):
        llm.generate([{"prompt_token_ids": [1]}] * 2, [GREEDY] * 3, use_tqdm=False)
    with pytest.raises(TypeError, match="SamplingParams"):
        llm.generate({"prompt_token_ids": [1]}, {"temperature": 0}, use_tqdm=False)


def test_request_that_can_never_fit_the_cache(llm):
    # 8 blocks of 4 hold 32 tokens; 20 + 20 - 1 = 39 do not fit even alone
    with pytest.raises(ValueError, match="KV blocks"):
        llm.generate({"prompt_token_ids": list(range(20))}, SamplingParams(max_tokens=20), use_tqdm=False)
    out = llm.generate({"prompt_token_ids": list(range(20))}, SamplingParams(max_tokens=13), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 13


def test_request_level_sampling_checks(llm):
    with pytest.raises(ValueError, match="tokenizer"):
        llm.generate({"prompt_token_ids": [1]}, SamplingParams(stop="x"), use_tqdm=False)
    with pytest.raises(ValueError, match="stop_token_ids"):
        llm.generate({"prompt_token_ids": [1]}, SamplingParams(stop_token_ids=[600]), use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()


def test_engine_add_request_rejects_duplicates(llm):
    engine = llm.engine
    engine.add_request("a", [1, 2], GREEDY)
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("a", [1, 2], GREEDY)
    with pytest.raises(TypeError, match="request_id"):
        engine.add_request(7, [1, 2], GREEDY)
    engine.abort_request("a")
    assert not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == 8
