"""`nanoserve serve` takes a pasted `vllm serve` command: engine flags from EngineArgs, server flags of its own."""
import pytest

from nanoserve.serve import engine_args, main, serve_parser

PASTED = ["/models/qwen3", "--trust-remote-code", "--download-dir", "/srv/hub", "--no-enable-chunked-prefill",
          "--disable-log-requests", "--served-model-name", "qwen3", "qwen", "--default-chat-template-kwargs",
          '{"enable_thinking": false}', "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}',
          "-tp", "1", "--max_num_seqs", "8"]


def test_a_pasted_vllm_serve_command_parses():
    parser = serve_parser()
    args = parser.parse_args(PASTED)
    flags = engine_args(args, parser)
    assert (flags.model, flags.trust_remote_code, flags.download_dir, flags.enable_chunked_prefill) == \
        ("/models/qwen3", True, "/srv/hub", False)
    assert flags.speculative_config == {"method": "ngram", "num_speculative_tokens": 3} and flags.max_num_seqs == 8
    assert args.served_model_name == ["qwen3", "qwen"] and args.disable_log_requests
    assert args.default_chat_template_kwargs == {"enable_thinking": False}


def test_engine_flags_come_from_engine_args():
    from nanoserve.engine.arg_utils import EngineArgs, FlexibleArgumentParser

    engine = {a.dest for a in EngineArgs.add_cli_args(FlexibleArgumentParser())._actions}
    serve = {a.dest for a in serve_parser()._actions}
    assert engine <= serve  # a flag the engine declares is a flag of `nanoserve serve`


@pytest.mark.parametrize("bad", [["--max-num-seqs", "0"], ["--dtype", "int3"], ["--speculative-config", "{x"],
                                 ["--speculative-config", '{"bad": 1}'], ["--default-chat-template-kwargs", "[1]"],
                                 ["--default-chat-template-kwargs", '{"tokenize": true}'], ["--port", "70000"]])
def test_a_bad_flag_value_is_one_line_and_exit_status_2(bad, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["serve", "/no/such/model", *bad])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("nanoserve serve: error: ")


def test_served_names_and_default_template_kwargs_reach_the_server(start_server, server):
    import httpx

    from conftest import MODEL_NAME

    other = start_server("--served-model-name", MODEL_NAME, "alias", "--default-chat-template-kwargs",
                         '{"enable_thinking": false}').url

    def post(url, route, body):
        return httpx.post(url + route, json=body, timeout=60, trust_env=False).json()

    assert [m["id"] for m in httpx.get(other + "/v1/models", trust_env=False).json()["data"]] == [MODEL_NAME, "alias"]
    r = post(other, "/v1/completions", {"model": "alias", "prompt": "Hi", "max_tokens": 1})
    assert r["model"] == "alias" and r["usage"]["completion_tokens"] == 1
    chat = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}]}
    off = {**chat, "chat_template_kwargs": {"enable_thinking": False}}
    on = {**chat, "chat_template_kwargs": {"enable_thinking": True}}
    assert post(other, "/tokenize", chat)["tokens"] == post(server, "/tokenize", off)["tokens"]  # the server default
    assert post(other, "/tokenize", on)["tokens"] == post(server, "/tokenize", chat)["tokens"]  # the request's wins
    assert post(server, "/tokenize", off)["tokens"] != post(server, "/tokenize", chat)["tokens"]
