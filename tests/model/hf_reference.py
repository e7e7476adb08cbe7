"""transformers as the oracle for the engine tests: the float32 model of a checkpoint and its greedy continuation."""
import torch
import transformers


def hf_model(checkpoint) -> transformers.PreTrainedModel:
    """The checkpoint in transformers (its config's model class: Qwen3, Qwen2, Llama), float32, eval mode."""
    return transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()


def hf_greedy(model, prompt: list, n: int, **generate_kwargs) -> list:
    """transformers' greedy continuation of `prompt` by exactly `n` tokens (extra kwargs go to generate)."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=0, **generate_kwargs)
    return out[0, len(prompt):].tolist()
