"""The tool's files at their edges: a command's outputs appear together or not at all,
new files honour the umask, `ulimit -f` is reported with the tool's message, special
files are refused without blocking, a run killed while it writes leaves nothing but
complete outputs, and reading a file takes memory bounded whatever its size.
MXFUSE_CLI names the built `mxfuse` binary (ctest sets it)."""
import json
import os
import resource
import signal
import stat
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

CLI = os.environ.get("MXFUSE_CLI", "")
pytestmark = pytest.mark.skipif(not CLI or not os.path.exists(CLI), reason="MXFUSE_CLI not set")


def _run(args, timeout=60, **kw):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)


def test_outputs_all_or_nothing(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.ones((64, 64), np.float32))
    d = tmp_path / "d"
    (d / "s_col.npy").mkdir(parents=True)  # a directory in the way of the last output
    p = _run(["quantize", x, "--out", d])
    assert p.returncode != 0 and "s_col.npy" in p.stderr
    assert sorted(os.listdir(d)) == ["s_col.npy"], os.listdir(d)  # nothing renamed, no temp left


def test_new_files_honour_umask(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.ones((64, 64), np.float32))
    p = _run(["quantize", x, "--out", tmp_path / "o"], preexec_fn=lambda: os.umask(0o077))
    assert p.returncode == 0, p.stderr
    for f in os.listdir(tmp_path / "o"):
        assert stat.S_IMODE(os.stat(tmp_path / "o" / f).st_mode) == 0o600, f


def test_file_size_limit_reported(tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.ones((256, 256), np.float32))

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    p = _run(["quantize", x, "--out", tmp_path / "o"], preexec_fn=limit)
    assert p.returncode not in (0, -25) and "write failed" in p.stderr, (p.returncode, p.stderr)
    assert not os.path.exists(tmp_path / "o") or not os.listdir(tmp_path / "o")


def test_fifo_refused_without_blocking(tmp_path):
    f = tmp_path / "fifo.npy"
    os.mkfifo(f)
    p = _run(["inspect", f], timeout=20)
    assert p.returncode != 0 and "not a regular file" in p.stderr


def _sparse_npy(path, shape, descr="<f4", itemsize=4):
    """A .npy of zeros whose data is a hole (ftruncate): no disk, no time."""
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join(f"{d}, " for d in shape))
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        f.truncate(10 + len(hdr) + int(np.prod(shape)) * itemsize)


def _wchar(pid):
    try:
        with open(f"/proc/{pid}/io") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("wchar"))
    except (OSError, StopIteration):
        return None


QUANT_OUTPUTS = {"q_row.npy": (4096, 8192), "s_row.npy": (4096, 256), "q_col.npy": (4096, 8192), "s_col.npy": (128, 8192)}


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/PID/io to follow the writes")
def test_killed_while_writing_leaves_only_complete_outputs(tmp_path):
    """SIGKILL at points spread over the writing of 136 MB of outputs: the directory never
    holds anything but complete outputs, hidden temporaries included."""
    x = tmp_path / "x.npy"
    _sparse_npy(x, (4096, 8192))
    total = sum(np.prod(s) + 128 for s in QUANT_OUTPUTS.values())
    mid_write = 0
    for rnd, frac in enumerate([0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98, 0.0, 0.5, 0.9]):
        out = tmp_path / f"o{rnd}"
        out.mkdir()
        if rnd >= 7:  # outputs already there: they are replaced, old or new but whole
            for name, shape in QUANT_OUTPUTS.items():
                np.save(out / name, np.full(shape, 7, np.uint8))
        p = subprocess.Popen([CLI, "quantize", x, "--out", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        seen, killed_at = set(), None
        while p.poll() is None:
            w = _wchar(p.pid)
            if rnd < 7:
                seen.update(os.listdir(out))
            if w is not None and w > frac * total:
                p.send_signal(signal.SIGKILL)
                killed_at = w
                break
        p.wait()
        if p.returncode == -signal.SIGKILL and killed_at is not None and killed_at < total:
            mid_write += 1
        left = sorted(os.listdir(out))
        assert set(left) <= set(QUANT_OUTPUTS), (frac, left)
        assert seen <= set(QUANT_OUTPUTS), ("seen while writing", frac, sorted(seen))
        for name in left:
            a = np.load(out / name)
            assert a.shape == QUANT_OUTPUTS[name] and a.dtype == np.uint8, (name, a.shape)
    assert mid_write >= 5, f"only {mid_write} kills landed while the outputs were written"


# A child's peak RSS counts the memory of the process it was forked from until its exec
# (Linux keeps the larger), and pytest may hold torch and jax: the tool is started from
# a bare interpreter, which reports the peak as its last line on stderr.
_PEAK_RSS = """import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
sys.stderr.write("\\npeak_rss_kib %d\\n" % ru.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""


def _peak_rss_kib(args):
    """Runs the tool; returns its peak RSS (KiB), exit status, stdout and stderr."""
    p = subprocess.run([sys.executable, "-S", "-E", "-c", _PEAK_RSS, CLI, *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    err, _, last = p.stderr.rstrip("\n").rpartition("\n")
    assert last.startswith("peak_rss_kib "), p.stderr
    return int(last.split()[1]), p, p.stdout, err


def test_inspect_memory_does_not_grow_with_the_file(tmp_path):
    """inspect of a 512 MiB .npy and of a 576 MiB safetensors (a tensor at an odd offset,
    a 64 MiB scale tensor) stays far below the files' size."""
    x = tmp_path / "big.npy"
    _sparse_npy(x, (128, 1 << 20))
    rss, p, out, err = _peak_rss_kib(["inspect", x, "--json"])
    assert p.returncode == 0, err
    assert json.loads(out)["tensors"][0]["values"]["amax"] == 0
    assert rss < 150 * 1024, f"inspect of a 512 MiB .npy peaked at {rss} KiB"

    n = 128 << 20
    h = {"odd": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
         "w": {"dtype": "F32", "shape": [n], "data_offsets": [3, 3 + 4 * n]},
         "w_scale": {"dtype": "F8_E8M0", "shape": [n // 2], "data_offsets": [3 + 4 * n, 3 + 4 * n + n // 2]}}
    js = json.dumps(h).encode()
    js += b" " * (-len(js) % 8)
    st = tmp_path / "big.safetensors"
    with open(st, "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js)
        f.truncate(8 + len(js) + 3 + 4 * n + n // 2)
    rss, p, out, err = _peak_rss_kib(["inspect", st, "--json"])
    assert p.returncode == 0, err
    t = {e["name"]: e for e in json.loads(out)["tensors"]}
    assert t["w"]["values"]["amax"] == 0 and t["w_scale"]["scales"]["count"] == n // 2
    assert t["w_scale"]["scales"]["histogram"] == {"0": n // 2}
    assert rss < 150 * 1024, f"inspect of a 576 MiB safetensors peaked at {rss} KiB"
