"""Checkers for appendix A7's exercises (checkpoint loading, GGUF)."""
import numpy as np

__all__ = ["CHECKS"]


def check_q4_1_block(decode) -> str:
    """A7.3: `decode(raw)` turns one 20-byte Q4_1 block (numpy uint8) into its 32 float32 weights."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    rng = np.random.default_rng(0)
    rows = rng.standard_normal((4, 32)).astype(np.float32) * rng.uniform(0.01, 1, (4, 1)).astype(np.float32)
    raw = quantize(rows, GGMLQuantizationType.Q4_1)
    want = dequantize(raw, GGMLQuantizationType.Q4_1)
    for i in range(len(rows)):
        got = np.asarray(decode(raw[i].copy()), dtype=np.float32).reshape(-1)
        assert got.shape == (32,), f"a block holds 32 weights, your function returned {got.shape}"
        assert np.allclose(got, want[i], rtol=0, atol=1e-6), (
            "the weights differ from gguf.quants.dequantize: d is bytes 0-1 and m bytes 2-3 (both fp16), the low "
            "nibbles of bytes 4-19 are weights 0-15 and the high nibbles weights 16-31, and w = d*q + m")
    return "your decoder equals gguf.quants.dequantize on 4 random blocks"


CHECKS = {"A7.3": check_q4_1_block}
