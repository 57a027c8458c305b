"""GPU tests of the Python package (scripts/test-python-gpu.sh): they skip,
each with the reason, where reshard's CUDA transports or PyTorch / JAX on a
GPU are missing. JAX must not take most of the GPU's memory at start (torch
shares the device in the same run)."""
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
