"""Written answers to appendix A7's exercises (checkpoint loading, GGUF)."""
import numpy as np

__all__ = ["EXPLANATIONS", "SOLUTIONS", "WRONG"]

EXPLANATIONS = {
    "A7.1": (
        "The config check passes (3 is a positive int) and so does every tensor's shape: layers 0 and 1 are\n"
        "exactly what config.json implies. The exactly-once check at the end of load_weights fires: the model\n"
        "built three layers, and every (parameter, shard) of model.layers.2 was never loaded, so the error\n"
        "lists them. Without that check layer 2 would keep what torch.empty left there: uninitialised memory."),
    "A7.2": (
        "check_config_types reads rope_theta, the token ids and the two switches, not rms_norm_eps, so a string\n"
        "passes it. ModelConfig.from_dict copies the string, and check_config_sizes refuses it: 'rms_norm_eps\n"
        "must be a positive number, got '1e-6''. The ValueError names config.json and the field."),
    "A7.4": (
        "Q8_0 stores 32 signed bytes and one fp16 scale per block: 34 bytes for 32 weights, 8.5 bits per\n"
        "weight, against Q4_1's 5. SmolLM2's file keeps the embedding (also the output head, since they are\n"
        "tied) in Q8_0: an error in the head moves every logit directly, so the file spends more bits there."),
}


def q4_1_block(raw: np.ndarray) -> np.ndarray:
    """A7.3: one 20-byte Q4_1 block -> its 32 weights (w = d*q + m)."""
    d = raw[0:2].view(np.float16)[0].astype(np.float32)
    m = raw[2:4].view(np.float16)[0].astype(np.float32)
    q = np.concatenate([raw[4:] & 0x0F, raw[4:] >> 4]).astype(np.float32)
    return d * q + m


SOLUTIONS = {"A7.3": q4_1_block}


def q4_1_block_interleaved(raw: np.ndarray) -> np.ndarray:
    """A typical mistake: each byte's two nibbles taken as neighbours (0, 1), not as weights i and i + 16."""
    d = raw[0:2].view(np.float16)[0].astype(np.float32)
    m = raw[2:4].view(np.float16)[0].astype(np.float32)
    q = np.stack([raw[4:] & 0x0F, raw[4:] >> 4], axis=1).reshape(-1).astype(np.float32)
    return d * q + m


WRONG = {"A7.3": q4_1_block_interleaved}
