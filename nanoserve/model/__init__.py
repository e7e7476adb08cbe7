"""nanoserve.model"""
# RoPE scalings plug into chapter 01's seam (qwen3.ROPE_SCALINGS) on import; appendix A7 teaches them
from nanoserve.model import rope_scalings  # noqa: F401
