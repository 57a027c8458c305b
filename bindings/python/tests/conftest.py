"""pytest setup: 8 CPU devices for JAX (set before JAX is imported), and the
repository root for spec files."""
import os
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def root() -> Path:
    return ROOT
