"""The real SmolLM2 GGUF for GPU tests, and the teacher-forced check of bf16 greedy output against fp32."""
import pytest
import torch


@pytest.fixture(scope="module")
def gguf_path():
    """The cached GGUF, or a skip (no CUDA, no flash-attn, or the model not fetched)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("flash_attn")
    from course.real_model import cached_gguf

    path = cached_gguf()
    if path is None:
        pytest.skip("the real model is not in the cache (python -m course.real_model fetches it)")
    return path


def assert_fp32_argmax_or_near_ties(gguf_path, outs) -> None:
    """Every generated token is fp32 transformers' argmax at its position, or within 2% of the logit range of it."""
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32).cuda().eval()
    with torch.no_grad():
        for out in outs:
            gen = list(out.outputs[0].token_ids)
            ids = torch.tensor([out.prompt_token_ids + gen], device="cuda")
            logits = model(ids).logits[0, len(out.prompt_token_ids) - 1:-1].float()
            chosen = logits.gather(1, torch.tensor(gen, device="cuda")[:, None])[:, 0]
            best = logits.max(-1).values
            assert bool((chosen >= best - 0.02 * (best - logits.min(-1).values)).all()), (best - chosen).tolist()
