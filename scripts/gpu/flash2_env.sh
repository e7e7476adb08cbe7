# Sourced by the one-call GPU scripts that need nothing stashed: names the GPU, installs flash-attn 2 into /tmp/site,
# sets $GPU (h100, h200, ...) and the environment every probe runs in.
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/flash_attn-*.whl
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oE 'H100|H200|A100|L40S' | tr A-Z a-z)
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
