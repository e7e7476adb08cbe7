"""`import nanoserve`, `from nanoserve import LLM` and building an LLM must not pull in heavy optional libraries."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# slow to import (transformers: seconds) or only needed by one feature (kernels, the HTTP server)
HEAVY = ("transformers", "flash_attn", "triton", "fastapi", "uvicorn")


def heavy_modules_after(statement: str) -> list:
    """Run `statement` in a fresh interpreter and return which HEAVY top-level modules it imported."""
    probe = f"{statement}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("statement", [
    "import nanoserve",
    "from nanoserve import LLM",
    "from nanoserve import LLM, SamplingParams, RequestOutput",
    "import nanoserve; nanoserve.LLMEngine",
])
def test_public_imports_stay_light(statement):
    heavy = heavy_modules_after(statement)
    assert heavy == [], (f"`{statement}` imports {heavy}; import them inside the functions that need them "
                         "(find the importer with `python -X importtime -c ...`)")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from nanoserve.model.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), num_hidden_layers=1)


def test_building_an_engine_stays_light(tiny_checkpoint):
    """The engine reads config.json itself: start-up pays no transformers import (seconds on a slow file system)."""
    statement = (f"from nanoserve import LLM\n"
                 f"llm = LLM({str(tiny_checkpoint)!r}, skip_tokenizer_init=True, device='cpu', num_kv_blocks=8)\n"
                 "assert llm.generate([{'prompt_token_ids': [1, 2, 3]}])[0].outputs[0].token_ids")
    heavy = heavy_modules_after(statement)
    assert heavy == [], f"building an LLM imports {heavy}; find the importer with `python -X importtime -c ...`"
