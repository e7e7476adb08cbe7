"""The `openai` client against `nanoserve serve`: completions, chat, streaming, n, logprobs, usage."""
from conftest import MODEL_NAME

CHAT = [{"role": "user", "content": "Say hello."}]


def test_models_lists_the_served_name(client):
    assert [m.id for m in client.models.list().data] == [MODEL_NAME]


def test_completion_counts_and_finish_reason(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello, world!", max_tokens=6, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and len(r.choices) == 1
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == 4 and r.usage.completion_tokens == 6 and r.usage.total_tokens == 10


def test_completion_token_id_prompts_and_several_prompts(client):
    r = client.completions.create(model=MODEL_NAME, prompt=[[9707, 11, 1879], [9707]], max_tokens=3, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1]
    assert r.usage.prompt_tokens == 4 and r.usage.completion_tokens == 6


def test_greedy_is_the_same_streamed_or_not(client):
    kwargs = dict(model=MODEL_NAME, messages=CHAT, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.role == "assistant"
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_n_completions_with_a_seed_are_reproducible(client):
    kwargs = dict(model=MODEL_NAME, prompt="Once upon", max_tokens=5, n=2, temperature=1.0, seed=7,
                  extra_body={"ignore_eos": True, "top_k": 50})
    a, b = client.completions.create(**kwargs), client.completions.create(**kwargs)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert a.usage.completion_tokens == 10


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=4, temperature=0, logprobs=3,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 3
        assert chosen <= 0 and abs(chosen - max(top.values())) < 1e-4  # greedy picks the most likely token


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=3, temperature=0,
                                       logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 2 for t in content)
    assert all(t.logprob == t.top_logprobs[0].logprob for t in content)


def test_stop_string_ends_with_stop(client):
    first = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=8, temperature=0,
                                      extra_body={"ignore_eos": True}).choices[0].text
    stop = first.strip()[1:3]  # a piece of what greedy decoding writes next (seeded weights: always the same)
    assert len(stop) == 2
    r = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=8, temperature=0, stop=[stop],
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "stop" and stop not in r.choices[0].text


def test_allowed_token_ids_and_logit_bias_steer_sampling(client):
    only = client.completions.create(model=MODEL_NAME, prompt=[[1, 2, 3]], max_tokens=4, temperature=1.0, seed=3,
                                     extra_body={"ignore_eos": True, "allowed_token_ids": [1479]})
    biased = client.completions.create(model=MODEL_NAME, prompt=[[1, 2, 3]], max_tokens=4, temperature=0,
                                       logit_bias={"1479": 100}, extra_body={"ignore_eos": True})
    assert only.choices[0].text == biased.choices[0].text != ""
    assert only.usage.completion_tokens == biased.usage.completion_tokens == 4
