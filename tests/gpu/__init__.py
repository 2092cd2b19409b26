"""The GPU tier: real NVIDIA GPUs only (see conftest.py and scripts/gpu-tier.sh)."""
