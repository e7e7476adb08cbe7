"""Request checks, without a server."""
import pytest

from nanoserve.entrypoints.protocol import RequestError, completion_request


def test_vllm_extras_reach_sampling_params():
    req = completion_request({"prompt": [[1, 2], "hi"], "n": 2, "top_k": 5, "min_p": 0.1, "min_tokens": 1,
                                    "repetition_penalty": 1.2, "ignore_eos": True, "max_tokens": 3})
    p = req.params
    assert req.prompts == [{"prompt_token_ids": [1, 2]}, "hi"] and req.body.model is None
    assert (p.n, p.top_k, p.min_p, p.min_tokens, p.repetition_penalty, p.ignore_eos, p.max_tokens) == \
        (2, 5, 0.1, 1, 1.2, True, 3)


def test_logit_processors_reach_sampling_params():
    req = completion_request({"prompt": "x", "logit_bias": {"7": 200}, "allowed_token_ids": [7, 9],
                                    "bad_words": ["no"], "include_stop_str_in_output": True})
    p = req.params
    assert p.logit_bias == {7: 100.0}  # JSON keys are strings; biases are clamped to [-100, 100]
    assert (p.allowed_token_ids, p.bad_words, p.include_stop_str_in_output) == ([7, 9], ["no"], True)


@pytest.mark.parametrize("body,param", [({"prompt": "x", "seed": "1"}, "seed"), ({"prompt": "x", "prompt_logprobs": -1},
                                        "prompt_logprobs"), ({"prompt": "x", "logit_bias": [1]}, "logit_bias"),
                                       ({"prompt": "x", "best_of": 3}, "best_of"), ({"prompt": []}, "prompt"),
                                       ({"prompt": "x", "cache_salt": "s"}, "cache_salt"),
                                       ({"prompt": "x", "thinking_token_budget": 8}, "thinking_token_budget"),
                                       ({"prompt": "x", "response_format": {"type": "structural_tag"}}, "response_format"),
                                       ({"prompt": "x", "structured_outputs": {"structural_tag": "{}"}},
                                        "structured_outputs"), ({"prompt": "x", "stop": [1]}, "stop")])
def test_refusals_name_the_field(body, param):
    with pytest.raises(RequestError) as info:
        completion_request(body)
    assert info.value.param == param and info.value.status == 400
