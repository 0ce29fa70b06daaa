"""One spec per op, read by every front end (eager, torch custom ops, JAX):

  - the Python signature: `gemm_amax(...)` & co. below are the public functions'
    parameters, defaults and documentation; called, each checks the arguments that exist
    only in Python and returns the call normalized (a named tuple), which the front ends
    run (`front_end` makes a front end's function of that signature);
  - the C side: tensors in the desc's order, structs and functions (`Op`);
  - the outputs' geometry and dtypes, from the inputs' shapes;
  - the results' named tuples, and dtype names.
Every rule of the contract itself is the C library's (its validation runs at plan time).
"""
import functools
from collections import namedtuple

from . import _abi as A

# ------------------------------------------------------------------ dtype names
# Every spelling a user may give for a dtype (c_dtype=..., dtype=...): the framework names
# and the library's, where "e2m1" means packed pairs (as an output dtype can only be).
_SPELLINGS = {}
for _code, _d in A.DTYPES.items():
    _SPELLINGS[_d.name] = _code
    if _d.array_name:
        _SPELLINGS[_d.array_name] = _code
_SPELLINGS.update(float=A.F32, half=A.F16, e2m1=A.E2M1X2, fp4=A.E2M1X2)
# dtype objects seen, by value: names, torch dtypes and the rest (NumPy, ml_dtypes, JAX) apart
_known_str, _known_torch, _known = {}, {}, {}


def _find_code(d):
    if isinstance(d, int) and d in A.DTYPES:
        return d
    name = d if isinstance(d, str) else getattr(d, "name", None) or getattr(d, "__name__", None) or str(d)
    name = str(name).replace("torch.", "").replace("jnp.", "")
    if name in _SPELLINGS:
        return _SPELLINGS[name]
    try:  # numpy / ml_dtypes / jax dtypes and scalar types
        import numpy as np

        n = np.dtype(d).name
        if n in _SPELLINGS:
            return _SPELLINGS[n]
    except Exception:
        pass
    names = ", ".join(A.DTYPES[c].array_name for c in A.DTYPES if A.DTYPES[c].array_name)
    raise TypeError(f"mxfuse: dtype {d!r} has no counterpart in mxfuse; expected one of {names} "
                    "(float4_e2m1fn_x2: packed pairs)")


def dtype_code(d):
    """The library's dtype for a torch / NumPy / JAX dtype, a type or a name."""
    # in tables apart, so that torch.compile's tracer (which meets names and torch dtypes)
    # sees only keys it can hash: torch 2.11's gave up on a table holding NumPy dtypes too
    known = _known_str if isinstance(d, str) else _known_torch if type(d).__module__ == "torch" else _known
    code = known.get(d)
    if code is None:
        code = known[d] = _find_code(d)
    return code


# ------------------------------------------------------------------ results
def _result_type(name, fields):
    """A namedtuple whose items are also reachable by name: `c, amax = r` or
    `r["c_tensor"]` (as the TupleDict of the cuDNN frontend)."""
    base = namedtuple(name, fields)

    def __getitem__(self, k):
        # an index through tuple(), which torch 2.11's tracer takes (not base.__getitem__)
        return getattr(self, k) if isinstance(k, str) else tuple(self)[k]

    def keys(self):
        return self._fields

    return type(name, (base,), {"__slots__": (), "__getitem__": __getitem__, "keys": keys})


GemmAmaxResult = _result_type("GemmAmaxResult", ("c_tensor", "amax_tensor"))
ProjRopeResult = _result_type("ProjRopeResult", ("out_fp8_row", "out_scales_row", "out_fp8_col", "out_scales_col"))
QuantizeResult = _result_type("QuantizeResult", ("q_row", "s_row", "q_col", "s_col"))
GroupedGemmAmaxResult = _result_type("GroupedGemmAmaxResult", ("c_tensor", "amax_tensor", "group_amax_tensor"))


# ------------------------------------------------------------------ the C side
class Op(namedtuple("Op", ("name", "tensors", "desc", "args", "plan", "run"))):
    """One op of the C library: its tensors in the desc's order, desc and args structs,
    plan and run functions."""


def _op(name):
    tensors, desc, args = A.ALL_OPS[name]
    return Op(name, tensors, desc, args, getattr(A.lib, f"mxf_{name}_plan"), getattr(A.lib, f"mxf_{name}_run"))


GEMM_AMAX, PROJ_ROPE, QUANTIZE, DEQUANTIZE = (_op(n) for n in ("gemm_amax", "proj_rope", "quantize", "dequantize"))
GROUPED_GEMM_AMAX = _op("grouped_gemm_amax")


def no_backward(op, name):
    """The error of an input that requires grad reaching an op: none has a backward formula
    (their inputs are quantized codes or their outputs are), so the gradient would be lost."""
    return (f"mxfuse.{op}: input '{name}' requires grad, but mxfuse.{op} has no backward formula (no gradient "
            f"flows through it); detach '{name}' (.detach()) or run the op under torch.no_grad()")

# The tensors each op writes (SPEC §4: writable, overlapping nothing else)
OUTPUTS = {"gemm_amax": ("c", "amax"),
           "proj_rope": ("out_row", "out_scales_row", "out_col", "out_scales_col"),
           "quantize": ("q_row", "s_row", "q_col", "s_col"),
           "dequantize": ("y",),
           "grouped_gemm_amax": ("c", "amax", "group_amax")}

INT32 = (-(1 << 31), (1 << 31) - 1)
UINT32 = (0, (1 << 32) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)


def int_arg(op, name, v, lo, hi, rule=None):
    """v as a Python int within [lo, hi] (checked before it reaches a C field), else the
    library's refusal naming the argument."""
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import operator

            v = operator.index(v)
        except TypeError:
            raise A.InvalidValueError(A.ERR_INVALID_VALUE, f"{op}: {name}={v!r}; expected an integer") from None
    if not lo <= v <= hi:
        raise A.InvalidValueError(A.ERR_INVALID_VALUE,
                                  f"{op}: {name}={v}; expected {rule or f'an integer in [{lo}, {hi}]'}")
    return v


def front_end(signature, module):
    """Decorates a front end's `impl(call)`: the function made has the parameters and the
    documentation of `signature` (one of the functions below) and runs impl on the call
    it returns; impl stays reachable as its `call`."""

    def wrap(impl):
        @functools.wraps(signature)
        def op(*args, **kwargs):
            return impl(signature(*args, **kwargs))

        op.__module__ = module
        op.call = impl
        return op

    return wrap


# ------------------------------------------------------------------ packed weights
class PackedWeights(namedtuple("PackedWeights", ("data", "b_meta", "sfb_meta", "sf_vec"))):
    """Weights packed by mxfuse.pack_weights (SPEC §7): `data`, the packed bytes (a 1-D
    uint8 array of b's framework, in host memory), and the b and sfb they were packed from
    as the library describes them (dtype, device, shape, strides) — what gemm_amax is given
    for b and sfb with them. Pass it as gemm_amax's b with sfb=None; same results, bit for
    bit, as b and sfb themselves."""

    __slots__ = ()

    @property
    def shape(self):
        """b's shape as it was described: (N, K[, L]) (K in bytes for packed e2m1 pairs)."""
        return self.b_meta[2]


class PackedScales(namedtuple("PackedScales", ("meta",))):
    """sfb's place in a call whose b is PackedWeights: its description, no data (the
    scales are in the packed bytes)."""

    __slots__ = ()


def pack_weights(b, sfb, *, sf_vec_size=32):
    """Lays out gemm_amax's weights b (N, K[, L]) and their scales sfb (compact or swizzled,
    as gemm_amax takes them) once for the CPU's decode kernels (SPEC §7); returns
    PackedWeights, which gemm_amax takes as b (with sfb=None) on the CPU: the same bits,
    and a decode-size a (few rows) runs at close to the memory's speed. Host tensors only;
    sf_vec_size as gemm_amax's (16 for NVFP4-style weights)."""
    return PackCall(b, sfb, int_arg("pack_weights", "sf_vec_size", sf_vec_size, 16, 32, "16 or 32"))


PackCall = namedtuple("PackCall", ("b", "sfb", "sf_vec"))


def packed_b(b, sfb, flags):
    """gemm_amax's b, sfb and flags for a call whose b may be PackedWeights."""
    if not isinstance(b, PackedWeights):
        return b, sfb, flags
    if sfb is not None:
        raise ValueError("gemm_amax: b is packed weights (mxfuse.pack_weights), which hold their scales; pass "
                         "sfb=None")
    return b, PackedScales(b.sfb_meta), flags | A.AMAX_B_PACKED


# ------------------------------------------------------------------ gemm_amax
GemmAmaxCall = namedtuple("GemmAmaxCall", ("a", "b", "sfa", "sfb", "c", "amax", "c_major", "c_code", "alpha",
                                           "stream", "extra"))
# the options of the class form (GemmAmax(samples..., **options))
GEMM_OPTIONS = ("sf_vec_size", "accumulate", "mma_tiler_mn", "cluster_shape_mn", "acc_dtype")


def gemm_amax(a, b, sfa, sfb, *, c_major="n", c_dtype="float32", sf_vec_size=32, alpha=None, amax=None,
              accumulate=False, mma_tiler_mn=None, cluster_shape_mn=None, acc_dtype=None, stream=None, c=None):
    """C = alpha * (A·SFA)(B·SFB)^T in c_dtype and amax = max|C| (SPEC §1). Returns
    (c_tensor, amax_tensor), also by name. a (M, K[, L]), b (N, K[, L]), each in its own
    format (a bf16 a has no scales: sfa=None); sfa/sfb compact (MN, Kb) / (L, MN, Kb) or
    swizzled; amax: an f32 tensor to write (with accumulate, also read), else a new one;
    c: a tensor to write C into (its dtype and layout are then C's), else a new one with
    rows padded to 16 bytes. b may be mxfuse.pack_weights(b, sfb) (then sfb=None: host
    tensors; SPEC §7). mma_tiler_mn and cluster_shape_mn (the cuDNN frontend's
    hints) are checked and ignored: the library chooses. JAX arrays run as XLA custom
    calls (mxfuse.jax; C n-major, no c= or stream=)."""
    if accumulate and amax is None:
        raise ValueError("gemm_amax: accumulate=True reads the previous amax; pass it as amax=")
    if c_major not in ("n", "m"):
        raise ValueError(f"gemm_amax: c_major={c_major!r}; expected 'n' or 'm'")
    if acc_dtype is not None and dtype_code(acc_dtype) != A.F32:
        raise ValueError(f"gemm_amax: acc_dtype {acc_dtype!r}; only float32 accumulation is supported")
    _check_hints("mma_tiler_mn", mma_tiler_mn)
    _check_hints("cluster_shape_mn", cluster_shape_mn)
    sf_vec = int_arg("gemm_amax", "sf_vec_size", sf_vec_size, 16, 32, "16 or 32")
    b, sfb, flags = packed_b(b, sfb, A.AMAX_ACCUMULATE if accumulate else 0)
    return GemmAmaxCall(a, b, sfa, sfb, c, amax, c_major, dtype_code(c_dtype), alpha, stream,
                        (("sf_vec", sf_vec), ("flags", flags)))


# cuDNN's hints by argument: the values its kernels take (0: choose), under its names
_HINTS = {"mma_tiler_mn": (("mma_tile_m", (0, 128)), ("mma_tile_n", (0, 128, 256))),
          "cluster_shape_mn": (("cluster_m", (0, 1, 2, 4)), ("cluster_n", (0, 1, 2, 4)))}


def _check_hints(arg, pair):
    if pair is None:
        return
    if len(pair) != 2:
        raise ValueError(f"mxfuse: {arg} must be a pair; got {pair!r}")
    for (name, allowed), v in zip(_HINTS[arg], pair):
        v = int_arg("gemm_amax", f"hint {name}", v, *INT32)
        if v not in allowed:
            expected = ", ".join(str(x) for x in allowed[1:-1])
            expected = f"0 (choose), {expected} or {allowed[-1]}" if expected else f"0 (choose) or {allowed[-1]}"
            raise A.InvalidValueError(A.ERR_INVALID_VALUE, f"gemm_amax: hint {name}={int(v)}; expected {expected}")


def gemm_c_shape(a_shape, b_shape, c_code):
    """C's logical shape (M, N[, L]) (N in bytes for packed e2m1 pairs)."""
    n = b_shape[0] if b_shape else 0
    return (a_shape[0], (n + 1) // 2 if c_code == A.E2M1X2 else n) + tuple(a_shape[2:3])


def gemm_amax_shape(a_shape):
    return (1, 1, 1) if len(a_shape) == 3 else (1,)


def gemm_c_layout(a_shape, b_shape, c_code, c_major):
    """How a new C is allocated: (memory shape, extent of its last dimension, permutation
    to the logical (M, N[, L]) view). Memory is C-contiguous with its rows padded to 16
    bytes (the library's row alignment); the view takes the first `extent` elements of
    each row."""
    shape = gemm_c_shape(a_shape, b_shape, c_code)
    m, nc = shape[0], shape[1]
    inner = nc if c_major == "n" else m
    per16 = 16 * 8 // max(A.DTYPES[c_code].bits, 8)
    padded = -(-inner // per16) * per16
    if len(shape) == 3:
        lb = shape[2]
        return ((lb, m, padded), nc, (1, 2, 0)) if c_major == "n" else ((lb, nc, padded), m, (2, 1, 0))
    return ((m, padded), nc, None) if c_major == "n" else ((nc, padded), m, (1, 0))


# ------------------------------------------------------------------ proj_rope
ProjRopeCall = namedtuple("ProjRopeCall", ("x", "w", "cos", "sin", "x_scale", "w_scale", "w_out_in", "head_dim",
                                           "stream", "extra"))


def proj_rope(x, w, cos, sin, *, x_scale=None, w_scale=None, w_out_in=True, fp32_epilogue=False, head_dim=192,
              stream=None):
    """DeepSeek-V3 Q up-projection (SPEC §2): GEMM, bf16 staging, per-head RoPE on the
    trailing cos.shape[1] features of each head_dim-wide head, MXFP8 along features and
    along tokens. bf16 x/w, or e4m3 x/w with e8m0 x_scale/w_scale; w (H·D, K) with
    w_out_in, else (K, H·D). Returns (out_fp8_row, out_scales_row, out_fp8_col,
    out_scales_col), also by name."""
    if (x_scale is None) != (w_scale is None):
        raise ValueError("proj_rope: give both x_scale and w_scale (MXFP8 inputs) or neither (bf16 inputs)")
    head_dim = int_arg("proj_rope", "head_dim", head_dim, 32, INT32[1] // 32 * 32, "a multiple of 32 and > 0")
    if head_dim % 32:
        raise A.InvalidValueError(A.ERR_INVALID_VALUE, f"proj_rope: head_dim={head_dim}; expected a multiple of 32 "
                                  "and > 0")
    return ProjRopeCall(x, w, cos, sin, x_scale, w_scale, bool(w_out_in), head_dim, stream,
                        (("flags", proj_flags(w_out_in, fp32_epilogue)),))


def proj_flags(w_out_in, fp32_epilogue):
    return (A.PROJ_W_OUT_IN if w_out_in else 0) | (A.PROJ_FP32_EPILOGUE if fp32_epilogue else 0)


def proj_outputs(x_shape, w_shape, w_out_in, head_dim):
    """(shape, dtype) of the four outputs for x (T, K) and w."""
    if len(x_shape) < 1 or len(w_shape) != 2:
        raise ValueError(f"proj_rope: x has shape {tuple(x_shape)} and w {tuple(w_shape)}; expected (T, K) and a "
                         "2-D w")
    t = x_shape[0]
    hd = w_shape[0] if w_out_in else w_shape[1]
    if head_dim <= 0 or hd % head_dim:
        raise A.InvalidValueError(A.ERR_INVALID_VALUE, f"proj_rope: w has shape {tuple(w_shape)}; its H*D={hd} "
                                  f"({'out-in' if w_out_in else 'in-out'}) is not a multiple of head_dim={head_dim}")
    h, d = hd // head_dim, head_dim
    return (((t, h, d), A.E4M3), ((t, h, d // 32), A.U8), ((t, h, d), A.E4M3), (((t + 31) // 32, h, d), A.U8))


# ------------------------------------------------------------------ quantize / dequantize
QuantizeCall = namedtuple("QuantizeCall", ("x", "directions", "stream", "extra"))


def quantize(x, *, rows=True, cols=True, stream=None):
    """MXFP8-quantizes a (rows, cols) bf16/f32 matrix along rows, columns or both (SPEC §3).
    Returns (q_row, s_row, q_col, s_col), also by name; a direction not asked is None."""
    d = (A.QUANT_ROWS if rows else 0) | (A.QUANT_COLS if cols else 0)
    if not d:
        raise ValueError("quantize: rows and cols are both False; ask for at least one direction")
    return QuantizeCall(x, d, stream, (("directions", d),))


def quantize_outputs(x_shape, directions):
    """(shape, dtype) of q_row, s_row, q_col, s_col for x (rows, cols); None for a
    direction not asked."""
    if len(x_shape) != 2:
        raise ValueError(f"quantize: x has shape {tuple(x_shape)}; expected (rows, cols)")
    r, c = x_shape
    row = (((r, c), A.E4M3), ((r, (c + 31) // 32), A.U8)) if directions & A.QUANT_ROWS else (None, None)
    col = (((r, c), A.E4M3), (((r + 31) // 32, c), A.U8)) if directions & A.QUANT_COLS else (None, None)
    return row + col


DequantizeCall = namedtuple("DequantizeCall", ("q", "s", "direction", "y_code", "stream", "extra"))


def dequantize(q, s, *, direction="rows", dtype="float32", stream=None):
    """y = e4m3(q) · 2^(s − 127) for MXFP8 codes q (rows, cols) with scales s of one
    direction ('rows': (rows, ceil(cols/32)), 'cols': (ceil(rows/32), cols)); y f32 or bf16."""
    d = direction_flag(direction)
    return DequantizeCall(q, s, d, dtype_code(dtype), stream, (("direction", d),))


def direction_flag(direction):
    if direction not in ("rows", "cols"):
        raise ValueError(f"dequantize: direction={direction!r}; expected 'rows' or 'cols'")
    return A.QUANT_ROWS if direction == "rows" else A.QUANT_COLS


# ------------------------------------------------------------------ grouped_gemm_amax
GroupedGemmAmaxCall = namedtuple("GroupedGemmAmaxCall", ("a", "b", "sfa", "sfb", "offs", "counts", "group_alpha",
                                                         "c", "amax", "group_amax", "c_code", "alpha", "stream",
                                                         "extra"))
GROUPED_OPTIONS = ("sf_vec_size", "accumulate")


def grouped_gemm_amax(a, b, sfa, sfb, *, offs=None, counts=None, c_dtype="float32", sf_vec_size=32, alpha=None,
                      group_alpha=None, amax=None, accumulate=False, group_amax=None, c=None, stream=None):
    """gemm_amax over the G groups (experts) of a mixture-of-experts layer in one call
    (SPEC §6). Returns (c_tensor, amax_tensor, group_amax_tensor), also by name.
    Contiguous layout (torch._grouped_mm's 2-D x 3-D): a (M, K), offs int32 (G) the
    nondecreasing ends of the groups' rows, c (M, N); rows at or past offs[-1] are not
    written. Masked layout: a (G, Mmax, K), counts int32 (G), c (G, Mmax, N); rows at or
    past counts[g] are not written. b (G, N, K); sfa / sfb compact ((M, Kb), (G, Mmax, Kb);
    (G, N, Kb)) or swizzled (L = 1 over a's rows, resp. L = G); a bf16 a has no scales
    (sfa=None). group_alpha: f32 (G) multiplying group g's results by alpha *
    group_alpha[g]. amax: max |C| over every group (accumulate: with its previous contents);
    group_amax_tensor: max |C| of each group (0 when empty). A new c has its rows padded to
    16 bytes; the rows no group holds keep whatever the new tensor held. offs / counts are
    read when the op runs: one plan serves every routing."""
    if (offs is None) == (counts is None):
        raise ValueError("grouped_gemm_amax: give offs= (contiguous layout, a (M, K)) or counts= (masked layout, "
                         "a (G, Mmax, K)), exactly one")
    if accumulate and amax is None:
        raise ValueError("grouped_gemm_amax: accumulate=True reads the previous amax; pass it as amax=")
    return GroupedGemmAmaxCall(a, b, sfa, sfb, offs, counts, group_alpha, c, amax, group_amax, dtype_code(c_dtype),
                               alpha, stream, (("sf_vec", int(sf_vec_size)),
                                               ("flags", A.AMAX_ACCUMULATE if accumulate else 0)))


def grouped_c_layout(a_shape, b_shape, c_code):
    """How a new C is allocated: (memory shape, extent of its last dimension): a's shape
    with K replaced by N (bytes for packed e2m1 pairs), rows padded to 16 bytes."""
    n = b_shape[1] if len(b_shape) == 3 else 0
    nc = (n + 1) // 2 if c_code == A.E2M1X2 else n
    per16 = 16 * 8 // max(A.DTYPES[c_code].bits, 8)
    return tuple(a_shape[:-1]) + (-(-nc // per16) * per16,), nc


def grouped_groups(b_shape):
    """G, from b (G, N, K)."""
    if len(b_shape) != 3:
        raise ValueError(f"grouped_gemm_amax: b has shape {tuple(b_shape)}; expected (G, N, K)")
    return b_shape[0]
