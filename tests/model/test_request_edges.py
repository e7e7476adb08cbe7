"""Two request edges (issue 41): n beyond max_num_seqs runs in waves; allowed_token_ids that min_tokens masks whole."""
import pytest

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

EOS = 151645  # the tiny Qwen3's <|im_end|>


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("edges"), seed=3, with_tokenizer=True,
                                max_position_embeddings=128)
    return LLM(path, device="cpu", block_size=4, num_kv_blocks=128, max_num_seqs=4, seed=0)


def test_n_beyond_max_num_seqs_runs_in_waves_and_stays_reproducible(llm):
    params = SamplingParams(n=40, temperature=1.0, seed=9, max_tokens=4, ignore_eos=True)
    first = llm.generate("Count", params, use_tqdm=False)[0]
    assert [c.index for c in first.outputs] == list(range(40))
    assert sum(len(c.token_ids) for c in first.outputs) == 160
    assert len({tuple(c.token_ids) for c in first.outputs}) > 1  # the children draw their own samples
    again = llm.generate("Count", params, use_tqdm=False)[0]
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in first.outputs]


def assert_still_usable(llm) -> None:
    ok = llm.generate("Count", SamplingParams(max_tokens=3, temperature=0), use_tqdm=False)[0].outputs[0]
    assert len(ok.token_ids) == 3


@pytest.mark.parametrize("kwargs", [
    dict(allowed_token_ids=[EOS], min_tokens=3),                          # the only allowed token is EOS
    dict(allowed_token_ids=[5, 9], stop_token_ids=[5, 9], min_tokens=2),  # every allowed token stops
], ids=["eos", "stop-tokens"])
def test_allowed_tokens_that_min_tokens_masks_are_refused_naming_both_fields(llm, kwargs):
    with pytest.raises(ValueError, match="allowed_token_ids.*min_tokens"):
        llm.generate("Count", SamplingParams(max_tokens=6, **kwargs), use_tqdm=False)
    assert_still_usable(llm)


def test_allowed_tokens_that_a_one_token_bad_word_bans_are_refused(llm):
    word = llm.get_tokenizer().decode([5])
    assert llm.get_tokenizer().encode(word, add_special_tokens=False) == [5]  # one token: banned at every step
    with pytest.raises(ValueError, match="allowed_token_ids.*bad_words"):
        llm.generate("Count", SamplingParams(max_tokens=6, allowed_token_ids=[5], bad_words=[word]), use_tqdm=False)
    assert_still_usable(llm)


def test_allowed_tokens_are_the_only_tokens_drawn_when_something_is_left(llm):
    params = SamplingParams(allowed_token_ids=[5, 9, EOS], stop_token_ids=[5], min_tokens=3, max_tokens=6,
                            temperature=1.0, seed=1)
    out = llm.generate("Count", params, use_tqdm=False)[0].outputs[0]
    assert set(out.token_ids) <= {5, 9, EOS}
    assert out.token_ids[:3] == [9, 9, 9]  # before min_tokens only the non-stopping token remains


def test_absurd_n_and_logprobs_beyond_the_vocabulary_are_refused_at_the_door(llm):
    slots = 128 * 4  # the fixture's num_kv_blocks x block_size
    with pytest.raises(ValueError, match=f"n={slots + 1} must be .* at most .* token slots \\({slots}\\)"):
        llm.generate("Count", SamplingParams(n=slots + 1, temperature=1.0, max_tokens=1), use_tqdm=False)
    with pytest.raises(ValueError, match=r"n=1180591620717411303424 must be"):  # 2**70: refused, not built
        llm.generate("Count", SamplingParams(n=2**70, temperature=1.0, max_tokens=1), use_tqdm=False)
    edited = SamplingParams(temperature=1.0, max_tokens=1)
    edited.n = 0  # a dataclass checks its fields when made; the door checks n again (zero completions never finish)
    with pytest.raises(ValueError, match="n=0 must be at least 1"):
        llm.generate("Count", edited, use_tqdm=False)
    assert_still_usable(llm)


def test_logprobs_beyond_the_vocabulary_are_refused_when_max_logprobs_is_unbounded(tmp_path):
    path = make_tiny_checkpoint(tmp_path / "m", seed=3, max_position_embeddings=128)  # vocabulary of 512
    llm = LLM(path, device="cpu", skip_tokenizer_init=True, block_size=4, num_kv_blocks=64, max_logprobs=-1)
    for field in ("logprobs", "prompt_logprobs"):
        with pytest.raises(ValueError, match=f"{field}=600 is more than the vocabulary \\(512 tokens\\)"):
            llm.generate([1, 2, 3], SamplingParams(max_tokens=2, **{field: 600}), use_tqdm=False)
    out = llm.generate([1, 2, 3], SamplingParams(max_tokens=2, logprobs=512), use_tqdm=False)[0].outputs[0]
    assert len(out.logprobs[0]) == 512  # the whole vocabulary is still allowed
    assert not llm.engine.has_unfinished_requests()


def test_a_none_among_the_sampling_params_is_refused(llm):
    with pytest.raises(TypeError, match="must hold SamplingParams, got NoneType"):
        llm.generate(["Count", "Count"], [SamplingParams(max_tokens=2), None], use_tqdm=False)
    assert_still_usable(llm)
