"""Request checks and the metrics text, without a server."""
import pytest

from nanoserve.entrypoints.metrics import Histogram, parse_metrics
from nanoserve.entrypoints.protocol import RequestError, parse_completion_request


def test_vllm_extras_reach_sampling_params():
    req = parse_completion_request({"prompt": [[1, 2], "hi"], "n": 2, "top_k": 5, "min_p": 0.1, "min_tokens": 1,
                                    "repetition_penalty": 1.2, "ignore_eos": True, "max_tokens": 3})
    p = req.params
    assert req.prompts == [{"prompt_token_ids": [1, 2]}, "hi"] and req.model is None
    assert (p.n, p.top_k, p.min_p, p.min_tokens, p.repetition_penalty, p.ignore_eos, p.max_tokens) == \
        (2, 5, 0.1, 1, 1.2, True, 3)


def test_logit_processors_reach_sampling_params():
    req = parse_completion_request({"prompt": "x", "logit_bias": {"7": 200}, "allowed_token_ids": [7, 9],
                                    "bad_words": ["no"], "include_stop_str_in_output": True})
    p = req.params
    assert p.logit_bias == {7: 100.0}  # JSON keys are strings; biases are clamped to [-100, 100]
    assert (p.allowed_token_ids, p.bad_words, p.include_stop_str_in_output) == ([7, 9], ["no"], True)


@pytest.mark.parametrize("body,param", [({"prompt": "x", "seed": "1"}, "seed"), ({"prompt": "x", "prompt_logprobs": 1},
                                        "prompt_logprobs"), ({"prompt": "x", "logit_bias": [1]}, "logit_bias"),
                                       ({"prompt": "x", "best_of": 3}, "best_of"), ({"prompt": []}, "prompt")])
def test_refusals_name_the_field(body, param):
    with pytest.raises(RequestError) as info:
        parse_completion_request(body)
    assert info.value.param == param and info.value.status == 400


def test_histogram_text_is_cumulative():
    h = Histogram("x_seconds", "help", buckets=(0.1, 1.0))
    for v in (0.05, 0.5, 0.7, 3.0):
        h.observe(v)
    values = parse_metrics("\n".join(h.render()))
    assert values['x_seconds_bucket{le="0.1"}'] == 1 and values['x_seconds_bucket{le="1.0"}'] == 3
    assert values['x_seconds_bucket{le="+Inf"}'] == 4 == values["x_seconds_count"]
    assert values["x_seconds_sum"] == pytest.approx(4.25)
