"""Shared setup of the Python tests: the package and mx_reference on sys.path, and a
seeded RNG.

MXFUSE_LIB names the shared library of a build (ctest sets it to the build's libmxfuse):
the tests then import the package of this source tree (python/, its ctypes mirror of the
C ABI included), which loads that library. Without it they import the installed
package. The seed comes from MXF_SEED when set (replay), else fresh per run; it is
printed in the header and with every failure.
"""
import os
import sys
import time

# JAX would otherwise take most of the GPU's memory when it starts, beside torch's
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np
import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
if os.environ.get("MXFUSE_LIB"):
    sys.path.insert(0, os.path.normpath(os.path.join(_HERE, "..", "..", "python")))

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
