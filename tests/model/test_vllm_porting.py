"""Code written for vLLM's offline API runs unchanged: its harmless keywords are accepted, the rest refused by name."""
import pytest

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.outputs import RequestOutputKind
from nanoserve.sampling import SamplingParams


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("port"), seed=1, with_tokenizer=True, max_position_embeddings=64)


@pytest.fixture(scope="module")
def llm(checkpoint):
    return LLM(checkpoint, swap_space=4, hf_token=None, seed=None, block_size=4, num_kv_blocks=64, max_logprobs=-1)


def test_constructor_defaults_of_vllm_are_accepted_and_others_refused(checkpoint, llm):
    assert isinstance(llm.config.seed, int)  # seed=None: a fresh seed was drawn
    with pytest.raises(ValueError, match="swap_space"):
        LLM(checkpoint, swap_space=8)
    with pytest.raises(ValueError, match="HF_TOKEN"):
        LLM(checkpoint, hf_token="hf_abc")


def test_call_options_at_neutral_values(llm):
    greedy = SamplingParams(temperature=0, max_tokens=3)
    base = llm.generate("hello", greedy, use_tqdm=False)[0]
    same = llm.generate("hello", greedy, use_tqdm=False, lora_request=None, priority=[0], tokenization_kwargs=None)[0]
    assert same.outputs[0].token_ids == base.outputs[0].token_ids
    for kwargs, word in (({"lora_request": object()}, "lora_request"), ({"priority": [2]}, "priority"),
                         ({"tokenization_kwargs": {"truncation": True}}, "tokenization_kwargs")):
        with pytest.raises(ValueError, match=word):
            llm.generate("hello", greedy, use_tqdm=False, **kwargs)
    reply = llm.chat([{"role": "user", "content": "hi"}], greedy, use_tqdm=False, lora_request=None)
    assert len(reply[0].outputs[0].token_ids) == 3


def test_bare_token_id_lists_are_prompts(llm):
    greedy = SamplingParams(temperature=0, max_tokens=2)
    one = llm.generate([5, 6, 7], greedy, use_tqdm=False)
    many = llm.generate([[5, 6, 7], [8, 9]], greedy, use_tqdm=False)
    dicts = llm.generate([{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": [8, 9]}], greedy, use_tqdm=False)
    assert len(one) == 1 and one[0].prompt_token_ids == [5, 6, 7]
    assert [o.outputs[0].token_ids for o in many] == [o.outputs[0].token_ids for o in dicts]
    assert many[0].outputs[0].token_ids == one[0].outputs[0].token_ids
    with pytest.raises(TypeError):
        llm.generate([[5, "x"]], greedy, use_tqdm=False)


def test_a_tqdm_like_class_is_used(llm):
    made = []

    class Bar:
        def __init__(self, **kwargs):
            made.append(kwargs["total"])
            self.n = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, k):
            self.n += k

        def set_postfix_str(self, text, refresh=True):
            pass

    llm.generate(["a", "b"], SamplingParams(max_tokens=2), use_tqdm=Bar)
    assert made == [2]


@pytest.mark.parametrize("bar", ["yes", 3])
def test_a_use_tqdm_that_is_no_bar_is_refused_before_anything_is_queued(llm, bar):
    greedy = SamplingParams(temperature=0, max_tokens=3)
    with pytest.raises(TypeError, match="use_tqdm must be a bool or a tqdm-like class"):
        llm.generate(["a", "b"], greedy, use_tqdm=bar)
    assert not llm.llm_engine.has_unfinished_requests()
    assert len(llm.generate("hello", greedy, use_tqdm=False)[0].outputs[0].token_ids) == 3  # the engine still serves


def test_sampling_params_fields_of_vllm(llm):
    whole = llm.generate("hi", SamplingParams(temperature=0, max_tokens=None), use_tqdm=False)[0].outputs[0]
    assert whole.finish_reason == "length" and len(whole.token_ids) == 64 - len(llm.get_tokenizer().encode("hi"))
    lp = llm.generate("hi", SamplingParams(temperature=0, max_tokens=1, logprobs=-1), use_tqdm=False)[0].outputs[0]
    assert len(lp.logprobs[0]) >= llm.engine.vocab_size  # the whole vocabulary (plus the sampled token)
    ids_only = llm.generate("hi", SamplingParams(temperature=0, max_tokens=3, detokenize=False), use_tqdm=False)[0]
    assert ids_only.outputs[0].text == "" and len(ids_only.outputs[0].token_ids) == 3
    with pytest.raises(ValueError, match="detokenize"):
        SamplingParams(detokenize=False, stop=["x"])
    params = SamplingParams(temperature=0.5, stop=["a"], logit_bias={1: 2.0})
    twin = params.clone()
    assert twin == params and twin.logit_bias is not params.logit_bias
    deltas = llm.engine.process_request("hi", SamplingParams(max_tokens=2, output_kind=RequestOutputKind.FINAL_ONLY))
    assert deltas.output_kind is RequestOutputKind.FINAL_ONLY
    with pytest.raises(ValueError, match="output_kind"):
        SamplingParams(output_kind="cumulative")


def test_whole_vocabulary_logprobs_need_the_engine_switch(checkpoint):
    small = LLM(checkpoint, block_size=4, num_kv_blocks=32)
    with pytest.raises(ValueError, match="max_logprobs=-1"):
        small.generate("hi", SamplingParams(logprobs=-1, max_tokens=1), use_tqdm=False)
