"""Structured outputs on CUDA: the graph runner and the one-step-ahead core keep every format (CUDA only)."""
import json
import re

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    pytest.importorskip("llguidance")
    pytest.importorskip("flash_attn")
    from nanoserve import LLM
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path_factory.mktemp("so") / "m", seed=0, with_tokenizer=True, hidden_size=256,
                                intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=128, max_position_embeddings=2048)
    llm = LLM(str(path), flash4_compile="startup", max_num_seqs=16, max_model_len=1024, num_kv_blocks=64)
    assert type(llm.engine.executor).__name__ == "GraphRunner" and llm.config.async_scheduling
    yield llm
    llm.shutdown()


def test_formats_hold_beside_free_rows_and_graphs_keep_replaying(llm):
    from nanoserve.sampling import SamplingParams
    from nanoserve.structured import StructuredOutputsParams

    schema = {"type": "object", "properties": {"k": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["k"], "additionalProperties": False}
    specs = [StructuredOutputsParams(json=schema, disable_any_whitespace=True),
             StructuredOutputsParams(regex=r"[0-9]{2}:[0-9]{2}"), StructuredOutputsParams(choice=["on", "off"])]
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=24, structured_outputs=s) for i, s in enumerate(specs)]
    params += [SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True) for _ in range(5)]
    before = sum(llm.engine.executor.replays.values())
    outs = llm.generate(["Reply:"] * len(params), params, use_tqdm=False)
    texts = [o.outputs[0].text for o in outs]
    assert 0 <= json.loads(texts[0])["k"] <= 99
    assert re.fullmatch(r"[0-9]{2}:[0-9]{2}", texts[1]) and texts[2] in ("on", "off")
    assert all(len(o.outputs[0].token_ids) == 24 for o in outs[3:])
    assert sum(llm.engine.executor.replays.values()) > before and llm.engine.stats.eager_steps == 0
