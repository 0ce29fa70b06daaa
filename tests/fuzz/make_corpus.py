"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/{npy,safetensors}).

Seeds are small valid files of every dtype the readers know, in every npy version, plus
a few hostile ones; the fuzzers mutate from there. Inputs that ever crashed a reader are
kept next to them (named crash-*) and replayed by the fuzz_replay_* tests.
Run: python3 tests/fuzz/make_corpus.py
"""
import io
import json
import os
import struct

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def npy_bytes(a, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, a)
    else:
        np.lib.format.write_array(b, a, version=version)
    return b.getvalue()


def st_bytes(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    d = os.path.join(HERE, "corpus", "npy")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    seeds = {
        "f32_v1": npy_bytes(x, (1, 0)),
        "f32_v2": npy_bytes(x, (2, 0)),
        "f32_v3": npy_bytes(x, (3, 0)),
        "f16": npy_bytes(x.astype(np.float16)),
        "bf16_void": npy_bytes(x.astype(ml_dtypes.bfloat16)),
        "e4m3_void": npy_bytes(x.astype(ml_dtypes.float8_e4m3fn)),
        "e5m2_f1": npy_bytes(x.astype(ml_dtypes.float8_e5m2)),
        "u8_scalar": npy_bytes(np.uint8(7)),
        "i8_empty": npy_bytes(np.zeros((0, 4), np.int8)),
        "fortran": npy_bytes(np.asfortranarray(x)),
        "f64_4d": npy_bytes(np.zeros((1, 2, 1, 2))),
    }
    for name, b in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(b)

    d = os.path.join(HERE, "corpus", "safetensors")
    os.makedirs(d, exist_ok=True)
    a = rng.integers(0, 256, 24, dtype=np.uint8).tobytes()
    seeds = {
        "multi": st_bytes(
            {
                "__metadata__": {"format": "pt"},
                "w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
                "s": {"dtype": "F8_E8M0", "shape": [4], "data_offsets": [12, 16]},
                "q": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [16, 20]},
                "p": {"dtype": "F4", "shape": [2, 4], "data_offsets": [20, 24]},
            },
            a,
        ),
        "f32": st_bytes({"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, a[:16]),
        "spellings": st_bytes(
            {
                "a": {"dtype": "F8_E4M3FN", "shape": [3], "data_offsets": [0, 3]},
                "b": {"dtype": "F8_E8M0FNU", "shape": [3], "data_offsets": [3, 6]},
                "c": {"dtype": "F8_E5M2", "shape": [], "data_offsets": [6, 7]},
                "d": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]},
            },
            a[:16],
        ),
        "empty": st_bytes({}, b""),
        "overlap": st_bytes(
            {
                "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]},
            },
            a[:6],
        ),
    }
    for name, b in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(b)


if __name__ == "__main__":
    main()
