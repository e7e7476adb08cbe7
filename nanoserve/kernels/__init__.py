"""Fused GPU kernels (Triton) for the model forward; generated from chapter 07 except this file."""
