"""`mxfuse gemm-amax / proj-rope --check` on DeepSeek-sized layers: a correct CPU result
passes SPEC §5's rule (exit status 0) even where a large K leaves outputs undetermined,
and an output with one determined code changed fails it (exit status 1), judged from
the saved files with --check-output.

MXFUSE_CLI names the built `mxfuse` binary (ctest sets it). Fixed seeds: the data is
the same on every run, so a failure replays as it is.
"""
import json
import os
import re
import subprocess

import ml_dtypes as md
import numpy as np
import pytest
from safetensors.numpy import save_file

CLI = os.environ.get("MXFUSE_CLI", "")
pytestmark = pytest.mark.skipif(not CLI or not os.path.exists(CLI), reason="MXFUSE_CLI not set")


def cuda_devices():
    """The CUDA devices the CLI sees (`mxfuse --version`: "CUDA backend: built, N devices")."""
    if not CLI or not os.path.exists(CLI):
        return 0
    out = subprocess.run([CLI, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"built, (\d+) device", out)
    return int(m.group(1)) if m else 0


# the checks run on the CPU everywhere, and on the first GPU too where there is one
DEVICES = ["cpu"] + (["cuda"] if cuda_devices() > 0 else [])


def mxfuse(*args, rc=0, device="cpu"):
    """Runs `mxfuse ARGS --device DEVICE --json`, asserts its exit status, returns its summary."""
    p = subprocess.run([CLI, *map(str, args), "--device", device, "--json"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == rc, f"mxfuse {' '.join(map(str, args))}: rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout)


def check(*args, rc, device="cpu"):
    return mxfuse(*args, rc=rc, device=device)["check"]


def mx_quantize(v):
    """MXFP8 along rows, as the layer's checkpoint would hold it: e4m3 codes, e8m0 scales."""
    vb = v.reshape(v.shape[0], -1, 32)
    am = np.abs(vb).max(-1, keepdims=True)
    e = np.clip(np.ceil(np.log2(np.maximum(am / 448, 1e-30))), -127, 127)
    codes = np.clip(vb * 2.0 ** -e, -448, 448).astype(md.float8_e4m3fn).reshape(v.shape)
    return codes, (e + 127).astype(np.uint8).squeeze(-1)


# ---------------------------------------------------------------- gemm-amax, DeepSeek kv_a
@pytest.fixture(scope="module")
def kv_a(tmp_path_factory):
    """M, N, K = 1000, 2112, 7168 (the kv_a projection of DeepSeek-V3), MXFP8 operands."""
    d = tmp_path_factory.mktemp("kv_a")
    rng = np.random.default_rng(0)
    a, sfa = mx_quantize(rng.standard_normal((1000, 7168)).astype(np.float32))
    b, sfb = mx_quantize((rng.standard_normal((2112, 7168)) * 0.02).astype(np.float32))
    save_file({"a": a, "sfa": sfa, "b": b, "sfb": sfb}, d / "layer.safetensors")
    return d, a, sfa, b, sfb


@pytest.mark.parametrize("device", DEVICES)
def test_gemm_amax_check_kv_a(kv_a, device):
    d, a, sfa, b, sfb = kv_a
    layer = d / "layer.safetensors"
    ck = check("gemm-amax", "--in", layer, "--c-dtype", "bf16", "--check", rc=0, device=device)
    assert ck["passed"] and ck["c_wrong"] == 0
    assert ck["c_undetermined_within"] > 0  # K = 7168 leaves outputs no f32 order can promise
    assert ck["c_determined_equal"] + ck["c_undetermined_within"] == ck["checked"]


def test_gemm_amax_check_catches_one_code(kv_a):
    """The layer's first 64 rows (C checked whole, a quarter of the work of the sampled
    check above): one determined code of the saved C changed, judged with --check-output."""
    d, a, sfa, b, sfb = kv_a
    save_file({"a": a[:64], "sfa": sfa[:64]}, d / "a64.safetensors")
    args = ["gemm-amax", "--in", d / "layer.safetensors", "--a", d / "a64.safetensors", "--sfa",
            d / "a64.safetensors", "--c-dtype", "bf16"]
    mxfuse(*args, "--out", d / "c64")
    # Row 0's element whose f64 reference lies nearest a bf16 value (relative to the code
    # spacing), among the large ones, is determined by a wide margin.
    ref = (a[0].astype(np.float64) * np.repeat(2.0 ** (sfa[0].astype(np.float64) - 127), 32)) @ \
          (b.astype(np.float64) * np.repeat(2.0 ** (sfb.astype(np.float64) - 127), 32, axis=1)).T
    near = ref.astype(np.float32).astype(md.bfloat16)
    gap = np.abs(ref - near.astype(np.float64)) / (np.abs(ref) * 2.0 ** -7)
    cand = np.flatnonzero((gap < 0.05) & (np.abs(ref) > np.median(np.abs(ref))))
    n = int(cand[np.argmax(np.abs(ref[cand]))])
    c = np.load(d / "c64" / "c.npy")
    assert c[0, n] == near.view(np.uint16)[n]
    os.makedirs(d / "bad")
    c[0, n] ^= 1  # the neighbouring bf16 code
    np.save(d / "bad" / "c.npy", c)
    np.save(d / "bad" / "amax.npy", np.load(d / "c64" / "amax.npy"))
    ck = check(*args, "--check-output", d / "bad", rc=1)
    assert not ck["passed"] and ck["c_wrong"] == 1 and ck["c_first_wrong"] == n


# ---------------------------------------------------------------- proj-rope, T = 777
@pytest.fixture(scope="module")
def q_proj(tmp_path_factory):
    """T = 777 tokens (a partial last column block), K = 1536, D = 192 (nope 128, rope 64)
    as DeepSeek-V3's Q up-projection, 4 of its 128 heads; bf16 inputs. Token 0 is a probe
    (x = e_0): its y are bf16 weights, exact in any order, so its row blocks are determined."""
    d = tmp_path_factory.mktemp("q_proj")
    rng = np.random.default_rng(0)
    t, k, h, rope = 777, 1536, 4, 64
    x = rng.standard_normal((t, k))
    x[0] = 0
    x[0, 0] = 1
    w = rng.standard_normal((h * 192, k)) * 0.02
    theta = 10000.0 ** (-np.arange(rope // 2) * 2.0 / rope)
    ang = np.arange(t)[:, None] * theta[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=1)
    sin = np.concatenate([np.sin(ang)] * 2, axis=1)
    save_file({"x": x.astype(md.bfloat16), "w": w.astype(md.bfloat16), "cos": cos.astype(md.bfloat16),
               "sin": sin.astype(md.bfloat16)}, d / "q.safetensors")
    return d


@pytest.mark.parametrize("device", DEVICES)
def test_proj_rope_check_t777(q_proj, device):
    d = q_proj
    out = d / f"o_{device}"
    ck = check("proj-rope", "--in", d / "q.safetensors", "--check", "--out", out, rc=0, device=device)
    for direction in ("row", "col"):
        assert ck[direction]["blocks_wrong"] == 0 and ck[direction]["within_0.1"] >= 0.95
        assert ck[direction]["blocks_undetermined"] > 0
    assert ck["passed"]
    if device != "cpu":
        return

    os.makedirs(d / "bad")
    for name in ("out_row", "out_scales_row", "out_col", "out_scales_col"):
        v = np.load(out / f"{name}.npy")
        if name == "out_row":
            v[0, 0, 5] ^= 1  # token 0, head 0, a nope feature: the neighbouring code
        np.save(d / "bad" / f"{name}.npy", v)
    ck = check("proj-rope", "--in", d / "q.safetensors", "--check-output", d / "bad", rc=1)
    assert not ck["passed"]
    assert ck["row"]["blocks_wrong"] == 1 and ck["row"]["first_wrong_block"] == 0
    assert ck["col"]["blocks_wrong"] == 0
