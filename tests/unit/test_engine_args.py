"""EngineArgs and its flags come from EngineConfig's declarations: vLLM's example-script pattern runs unchanged."""
import argparse
import dataclasses

import pytest

from nanoserve.engine.config import EngineConfig
from nanoserve.fields import Rule, check_field, rules_of
from nanoserve.model.tiny import make_tiny_checkpoint


def parsed(*argv):
    from nanoserve import EngineArgs, FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    EngineArgs.add_cli_args(parser)
    return vars(parser.parse_args(list(argv)))


def test_every_engine_argument_has_a_flag_and_a_field():
    from nanoserve import AsyncEngineArgs, EngineArgs

    names = list(rules_of(EngineConfig))
    assert [f.name for f in dataclasses.fields(EngineArgs)] == names
    assert [f.name for f in dataclasses.fields(AsyncEngineArgs)] == names
    assert set(parsed()) == set(names) and "attention_backend_class" not in names
    assert parsed()["max_num_seqs"] == EngineConfig.__dataclass_fields__["max_num_seqs"].default


def test_flags_take_vllm_spellings():
    args = parsed("--model", "m", "--max_num_seqs=4", "--block-size", "8", "--no-enable-prefix-caching",
                  "--enforce-eager", "--gpu-memory-utilization=0.5", "--dtype", "half")
    assert (args["model"], args["max_num_seqs"], args["block_size"]) == ("m", 4, 8)
    assert args["enable_prefix_caching"] is False and args["enforce_eager"] is True
    assert args["gpu_memory_utilization"] == 0.5 and args["async_scheduling"] is None


def test_a_script_flag_spelled_with_underscores_takes_both_spellings():
    from nanoserve import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    parser.add_argument("--max_tokens", type=int, default=16)
    assert parser.parse_args(["--max-tokens", "3"]).max_tokens == 3
    assert parser.parse_args(["--max_tokens=4"]).max_tokens == 4


def test_top_level_exports():
    import nanoserve

    assert {"EngineArgs", "AsyncEngineArgs", "FlexibleArgumentParser"} <= set(nanoserve.__all__) & set(dir(nanoserve))


def test_choices_and_types_come_from_the_rules(capsys):
    with pytest.raises(SystemExit):
        parsed("--attention-backend", "xformers")
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parsed("--max-num-seqs", "many")
    with pytest.raises(SystemExit):
        parsed("--speculative-config", "{not json")


def test_speculative_config_flag_takes_json():
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    assert parsed("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, '
                  '"prompt_lookup_max": 4, "prompt_lookup_min": 2}')["speculative_config"] == spec


def test_bad_values_are_checked_when_the_config_is_built():
    from nanoserve import EngineArgs

    with pytest.raises(ValueError, match="max_num_seqs must be >= 1"):
        EngineArgs(model="m", max_num_seqs=0).create_engine_config()
    with pytest.raises(ValueError, match="kv_cache_dtype='fp8' is not supported"):
        EngineArgs.from_cli_args(argparse.Namespace(**parsed("--kv-cache-dtype", "fp8"))).create_engine_config()


def test_the_vllm_example_script_pattern(tmp_path):
    """parser -> add_cli_args -> vars(parse_args()) -> LLM(**args), and LLMEngine.from_engine_args."""
    from nanoserve import LLM, EngineArgs, LLMEngine, SamplingParams

    path = make_tiny_checkpoint(tmp_path / "tiny", seed=2, max_position_embeddings=64)
    args = parsed("--model", str(path), "--device=cpu", "--skip_tokenizer_init", "--block-size=4",
                  "--num-kv-blocks", "32", "--max-num-seqs", "4")
    with LLM(**args) as llm:
        out = llm.generate({"prompt_token_ids": [1, 2, 3]}, SamplingParams(temperature=0, max_tokens=3),
                           use_tqdm=False)[0]
        assert llm.config.max_num_seqs == 4 and len(out.outputs[0].token_ids) == 3
    engine = LLMEngine.from_engine_args(EngineArgs(**args))
    try:
        assert engine.config.num_kv_blocks == 32
    finally:
        engine.shutdown()
    with pytest.raises(TypeError, match="EngineArgs"):
        LLMEngine.from_engine_args(args)


def test_unknown_llm_keyword_is_named():
    from nanoserve import LLM

    with pytest.raises(TypeError, match="no_such_option"):
        LLM("m", no_such_option=1)


def test_a_rule_describes_its_range_in_the_message():
    rule = Rule("float", gt=0.0, le=1.0)
    assert check_field("top_p", 1, rule) == 1.0 and isinstance(check_field("top_p", 1, rule), float)
    for bad, error in ((0, ValueError), (True, TypeError), (float("nan"), TypeError), ("0.5", TypeError)):
        with pytest.raises(error, match="top_p"):
            check_field("top_p", bad, rule)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\], got 0.0"):
        check_field("top_p", 0, rule)


def test_compilation_config_picks_which_steps_replay_graphs(tmp_path):
    """vLLM's cudagraph_mode: FULL (decode and mixed graphs), FULL_DECODE_ONLY, NONE (= enforce_eager)."""
    from nanoserve.attention.torch_ref import TorchAttentionBackend
    from nanoserve.engine.selector import graph_variants
    from nanoserve.model.loader import load_config

    path = make_tiny_checkpoint(tmp_path / "tiny")
    model_config = load_config(path)

    def resolved(**kwargs):
        return EngineConfig(str(path), device="cpu", disable_cascade_attn=True, **kwargs).resolve(model_config)

    for kwargs, mode, eager, names in (
            (dict(), "FULL", False, ["decode", "mixed"]),
            (dict(compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"}), "FULL_DECODE_ONLY", False, ["decode"]),
            (dict(compilation_config={"cudagraph_mode": "NONE"}), "NONE", True, None),
            (dict(enforce_eager=True), "NONE", True, None)):
        config = resolved(**kwargs)
        assert (config.compilation_config, config.enforce_eager) == ({"cudagraph_mode": mode}, eager)
        if names:
            assert [v.name for v in graph_variants(config, TorchAttentionBackend())] == names
    assert parsed("--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}')["compilation_config"] == {
        "cudagraph_mode": "FULL_DECODE_ONLY"}
    with pytest.raises(ValueError, match=r"compilation_config.cudagraph_mode='PIECEWISE' is not supported: "
                                         "nanoserve captures whole steps"):
        EngineConfig(str(path), compilation_config={"cudagraph_mode": "PIECEWISE"})
    with pytest.raises(ValueError, match=r"unsupported key\(s\) \['level'\]"):
        EngineConfig(str(path), compilation_config={"level": 3})
    with pytest.raises(TypeError, match="compilation_config must be a dict, got int"):
        EngineConfig(str(path), compilation_config=3)
