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


def refusal(argv, capsys) -> tuple:
    """(exit status, stderr) of a command line refused at the door, argparse's way (SystemExit) or main's."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("flags,says", [
    (["--ssl-keyfile", "/no/such/key.pem", "--ssl-certfile", "/no/such/cert.pem"], "ssl_keyfile '/no/such/key.pem'"),
    (["--ssl-certfile", "/no/such/cert.pem"], "ssl_certfile '/no/such/cert.pem'"),
    (["--ssl-keyfile", __file__], "--ssl-keyfile needs --ssl-certfile")])
def test_tls_files_are_checked_before_the_model_loads(flags, says, capsys):
    code, err = refusal(["serve", "/no/such/model", *flags], capsys)  # the model's error would come later
    assert code == 2 and err.count("\n") == 1 and err.startswith("nanoserve serve: error: ") and says in err, err


def test_readable_tls_files_pass_the_door(tmp_path, capsys):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    key.write_text("k")
    cert.write_text("c")
    code, err = refusal(["serve", "/no/such/model", "--port", "0", "--ssl-keyfile", str(key), "--ssl-certfile",
                         str(cert)], capsys)
    assert code == 1 and "ssl" not in err and "/no/such/model" in err  # on to the model, which is not there


def test_an_unknown_command_is_not_a_model(capsys):
    code, err = refusal(["bogus"], capsys)
    assert code == 2 and err.count("\n") == 1 and "invalid command 'bogus'" in err
    code, err = refusal(["/no/such/model", "--port", "0"], capsys)
    assert code == 2 and "invalid command '/no/such/model'" in err
    assert main(["/no/such/model", "--port", "0"], serve_by_default=True) == 1  # python -m nanoserve.serve MODEL
    assert "nanoserve serve: error: " in capsys.readouterr().err


def test_the_model_is_given_once(capsys):
    code, err = refusal(["serve", "/no/such/model", "--model", "/no/such/other"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--model" in err and "positional" in err, err
    assert engine_args(serve_parser().parse_args(["--model", "/models/qwen3"]), serve_parser()).model == "/models/qwen3"
