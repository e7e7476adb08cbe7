"""Fused GPU kernels (Triton) for the model forward; generated from chapter 08 except this file."""
