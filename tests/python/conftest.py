"""Shared setup of the Python tests: the binding on sys.path and a seeded RNG.

MXFUSE_LIB names the shared library (ctest sets it to the build's libmxfuse); the test
modules load it through mxfuse_ctypes.load_from_env(). The seed
comes from MXF_SEED when set (replay), else fresh per run; it is printed in the header
and with every failure.
"""
import os
import sys
import time

# JAX would otherwise take most of the GPU's memory when it starts, beside torch's
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_SEED = int(os.environ.get("MXF_SEED", "0"), 0) or (time.time_ns() ^ os.getpid()) & ((1 << 63) - 1)


def pytest_report_header(config):
    return [f"seed={_SEED} (replay with MXF_SEED={_SEED})", f"MXFUSE_LIB={os.environ.get('MXFUSE_LIB', '')}"]


@pytest.fixture(scope="session")
def seed():
    return _SEED


@pytest.fixture
def rng(request):
    # one stream per test, derived from the run's seed and the test's name, so that a
    # single test replays alone with the same MXF_SEED
    h = sum((i + 1) * ord(c) for i, c in enumerate(request.node.name))
    print(f"seed={_SEED} (replay with MXF_SEED={_SEED})")
    return np.random.default_rng([_SEED, h])
