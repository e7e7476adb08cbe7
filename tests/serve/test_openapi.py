"""/openapi.json is a valid OpenAPI 3 document built from the request models, listing every route."""
import httpx
import pytest

ROUTES = {"/health", "/metrics", "/version", "/v1/models", "/v1/models/{model_id}", "/v1/completions",
          "/v1/chat/completions", "/v1/responses", "/tokenize", "/detokenize", "/ping"}


@pytest.fixture(scope="module")
def spec(server):
    return httpx.get(server + "/openapi.json", timeout=10, trust_env=False).json()


def test_openapi_document_is_valid_and_lists_every_route(spec):
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(spec)
    assert spec["openapi"].startswith("3.")
    assert ROUTES <= set(spec["paths"])


def test_generation_routes_document_their_request_models(spec):
    def body_schema(route):
        ref = spec["paths"][route]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        return spec["components"]["schemas"][ref.rsplit("/", 1)[1]]

    completion, chat = body_schema("/v1/completions"), body_schema("/v1/chat/completions")
    assert "prompt" in completion["required"] and "messages" in chat["required"]
    assert {"temperature", "top_k", "stream_options", "logprobs"} <= set(completion["properties"])
    assert {"tools", "tool_choice", "include_reasoning", "max_completion_tokens"} <= set(chat["properties"])


def test_docs_page_is_served(server):
    r = httpx.get(server + "/docs", timeout=10, trust_env=False)
    assert r.status_code == 200 and "openapi.json" in r.text


def test_generation_routes_document_their_answer(spec):
    for route in ("/v1/completions", "/v1/chat/completions"):
        ref = spec["paths"][route]["post"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        answer = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert {"id", "object", "created", "model", "choices", "usage"} <= set(answer["required"])
    assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(spec["components"]["schemas"]["Usage"]["properties"])


def test_every_route_the_app_serves_is_in_the_document(tiny_model_dir):
    """Read from the app itself, not from a list: a route added later without a schema entry fails here."""
    from fastapi.routing import APIRoute

    from nanoserve import EngineArgs, LLMEngine
    from nanoserve.entrypoints.async_engine import AsyncEngine
    from nanoserve.entrypoints.openai_server import build_app
    from nanoserve.serve import FrontendArgs

    engine = AsyncEngine(LLMEngine.from_engine_args(EngineArgs(model=str(tiny_model_dir), device="cpu",
                                                               max_model_len=256, num_kv_blocks=32)))
    try:
        app = build_app(engine, FrontendArgs(), str(tiny_model_dir))
        own = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}  # FastAPI's, not in any schema
        assert all(isinstance(r, APIRoute) for r in app.routes if r.path not in own)
        served = {r.path.replace(":path}", "}") for r in app.routes if r.path not in own}  # OpenAPI drops :path
        assert served == set(app.openapi()["paths"]) == ROUTES
    finally:
        engine.shutdown()
