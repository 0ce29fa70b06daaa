"""The tool's files at their edges: a command's outputs appear together or not at all,
new files honour the umask, `ulimit -f` is reported with the tool's message, special
files are refused without blocking.
MXFUSE_CLI names the built `mxfuse` binary (ctest sets it)."""
import os
import resource
import stat
import subprocess

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
