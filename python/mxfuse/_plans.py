"""C plans in Python: `Plan` owns one, `make` makes one from tensor Metas, and the one
cache of the package keeps the recent ones (or what a front end keeps beside a plan) by
a key the front end chooses: its tensors' geometry, dtypes and devices and the desc's
other fields. The cache holds no workspace: a call's workspace comes from the framework
(torch's allocator, NumPy, XLA's buffers).
"""
import ctypes
from collections import OrderedDict

from . import _abi as A
from . import _spec as S
from . import _tensors as T


class Plan:
    """Owns one C plan: its workspace size, backend name, and the run function of its op."""

    __slots__ = ("handle", "workspace_size", "backend", "_run", "__weakref__")

    def __init__(self, op, desc):
        self.handle = None
        h = ctypes.c_void_p()
        A.check(op.plan(ctypes.byref(h), ctypes.byref(desc)))
        self.handle = h
        self.workspace_size = A.lib.mxf_plan_workspace_size(h)
        self.backend = A.lib.mxf_plan_backend(h).decode()
        self._run = op.run

    def run(self, args, workspace_ptr, stream):
        A.check(self._run(self.handle, ctypes.byref(args), workspace_ptr, self.workspace_size, stream))

    def __del__(self, _destroy=A.lib.mxf_plan_destroy):
        if self.handle:
            _destroy(self.handle)
            self.handle = None


def make(op, metas, extra, ptrs=None):
    """A C plan of `op` (a _spec.Op) for tensors of these Metas (None: absent) and the
    desc's other fields `extra` ((name, value) pairs); with `ptrs`, the tensors' data
    pointers, which a backend may plan for (proj_rope's kernels and their alignment)."""
    d = op.desc()
    for i, (name, m) in enumerate(zip(op.tensors, metas)):
        if m is not None:
            T.fill(getattr(d, name), m, ptrs[i] if ptrs else None)
    fields = dict(d._fields_)
    for name, v in extra:
        ctype = fields[name]
        if ctype in (ctypes.c_int, ctypes.c_uint):
            signed = ctype is ctypes.c_int
            v = S.int_arg(op.name, name, v, *(S.INT32 if signed else S.UINT32))
        setattr(d, name, v)
    return Plan(op, d)


SIZE = 64
_cache = OrderedDict()


def get(key):
    """The entry of `key`, or None."""
    e = _cache.get(key)
    if e is not None:
        _cache.move_to_end(key)
    return e


def put(key, entry):
    _cache[key] = entry
    if len(_cache) > SIZE:
        _cache.popitem(last=False)


def cached(op, metas, extra, ptrs=None):
    """The plan of make's arguments, from the cache or made and kept; with `ptrs`, kept
    apart by the pointers' alignment (their low four bits)."""
    key = (op.name, metas, extra, tuple((q or 0) & 15 for q in ptrs) if ptrs else None)
    p = get(key)
    if p is None:
        p = make(op, metas, extra, ptrs)
        put(key, p)
    return p


def clear():
    """Drops the cached plans (and the C library's one-call cache)."""
    _cache.clear()
    A.lib.mxf_plan_cache_clear()
