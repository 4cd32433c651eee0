"""CUDA C for CuPy kernels, written from the op registry's C spellings (`OpDef.cuda`).

Input: a `ScalarProgram` (typed kernel inputs and a straight-line list of scalar instructions
over registry ops, some of them outputs, optionally reduced over axes). Output: a `KernelDef`
holding exactly the arguments of `cupy.ElementwiseKernel` / `cupy.ReductionKernel`, and
`translation_unit(defs)`, the same code as one standalone CUDA file, so CI compiles every kernel
with nvcc and tests run the bodies on the host. Nothing here needs CuPy or a GPU.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np

from ..ir.ops import OPS

# NumPy dtype -> C type inside kernels (CuPy's mapping; float16 and complex are not supported)
CTYPES = {"bool": "bool", "int8": "signed char", "uint8": "unsigned char", "int16": "short",
          "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int",
          "int64": "long long", "uint64": "unsigned long long", "float32": "float",
          "float64": "double"}

# C definitions of the helpers the registry's C spellings call (ops.SCALAR_HELPERS, and _rt_abs
# and _rt_pow, which only the C spellings need: C's fabs takes no integers, and C's pow turns
# integers into doubles); each kernel's preamble carries the ones its body uses.
# `__host__ __device__` so the host tests can run them too.
HELPERS = {
    # integers: exact, by squaring, as NumPy (which rejects negative powers; 0 here unless |x|=1)
    "_rt_pow": "template <typename T> __host__ __device__ __forceinline__ T _rt_pow(T x, T y) {\n"
               "    if (y < T(0)) return (x == T(1) || x == T(-1)) ? ((y % T(2)) ? x : T(1)) "
               ": T(0);\n"
               "    T r = T(1);\n"
               "    while (y) { if (y & T(1)) r *= x; x *= x; y >>= 1; }\n"
               "    return r;\n}\n"
               "__host__ __device__ __forceinline__ float _rt_pow(float x, float y) "
               "{ return powf(x, y); }\n"
               "__host__ __device__ __forceinline__ double _rt_pow(double x, double y) "
               "{ return pow(x, y); }",
    "_rt_abs": "template <typename T> __host__ __device__ __forceinline__ T _rt_abs(T x) {\n"
               "    return x < T(0) ? T(-x) : x;\n}\n"
               "__host__ __device__ __forceinline__ float _rt_abs(float x) { return fabsf(x); }\n"
               "__host__ __device__ __forceinline__ double _rt_abs(double x) { return fabs(x); }",
    # NumPy's sign: NaN stays NaN and both zeros give +0 (the comparisons are false: x - x)
    "_rt_sign": "template <typename T> __host__ __device__ __forceinline__ T _rt_sign(T x) {\n"
                "    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(x - x));\n}",
    # the registry's C spellings call CUDA's own exp, expm1, log, log1p (these helpers are
    # numba's vectorisable forms; CUDA's are already fast)
    **{h: f"template <typename T> __host__ __device__ __forceinline__ T {h}(T x) {{\n"
          f"    return {h[4:]}(x);\n}}" for h in ("_rt_exp", "_rt_expm1", "_rt_log", "_rt_log1p")},
    "_rt_tanh": "template <typename T> __host__ __device__ __forceinline__ T _rt_tanh(T x) {\n"
                "    return tanh(x);\n}",
    "_rt_sigmoid": "template <typename T> __host__ __device__ __forceinline__ T "
                   "_rt_sigmoid(T x) {\n"
                   "    T e = exp(x < T(0) ? x : T(-x));\n    T d = T(1) / (T(1) + e);\n"
                   "    return x >= T(0) ? d : e * d;\n}",
    # NumPy's npy_logaddexp / npy_logaddexp2 (equal arguments first: no inf - inf)
    "_rt_logaddexp": "template <typename T> __host__ __device__ __forceinline__ T "
                     "_rt_logaddexp(T x, T y) {\n"
                     "    if (x == y) return x + T(0.6931471805599453);\n"
                     "    T d = x - y;\n"
                     "    if (d > T(0)) return x + log1p(exp(-d));\n"
                     "    if (d <= T(0)) return y + log1p(exp(d));\n    return d;\n}",
    "_rt_logaddexp2": "template <typename T> __host__ __device__ __forceinline__ T "
                      "_rt_logaddexp2(T x, T y) {\n"
                      "    if (x == y) return x + T(1);\n"
                      "    T d = x - y;\n"
                      "    if (d > T(0)) return x + T(1.4426950408889634) * log1p(exp2(-d));\n"
                      "    if (d <= T(0)) return y + T(1.4426950408889634) * log1p(exp2(d));\n"
                      "    return d;\n}",
    # ir/special.py's algorithm (reflection, recurrence to x >= 10 + 2n, asymptotic series)
    "_rt_polygamma": """template <typename T> __host__ __device__ T _rt_polygamma(int n, T xt) {
    const double B[7] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730,
                         7.0 / 6};
    double x = (double)xt;
    if (x != x) return xt;
    if (x <= 0 && x == floor(x)) {
        if (n == 0) return (T)(x == 0 ? copysign(HUGE_VAL, -x) : nan(""));
        return (T)(n % 2 == 1 ? HUGE_VAL : -HUGE_VAL);
    }
    if (isinf(x)) return (T)(x > 0 ? (n == 0 ? HUGE_VAL : 0.0) : nan(""));
    double res = 0.0;
    if (n == 0 && x < 0) { res = -M_PI / tan(M_PI * x); x = 1.0 - x; }
    double sign = (n % 2 == 1) ? 1.0 : -1.0, fact = 1.0;
    for (int i = 2; i <= n; ++i) fact *= i;
    double target = 10.0 + 2.0 * n;
    while (x < target) { res += (n == 0) ? -1.0 / x : sign * fact / pow(x, n + 1); x += 1.0; }
    if (n == 0) {
        double r = log(x) - 0.5 / x, x2 = x * x, p = x2;
        for (int k = 0; k < 7; ++k) { r -= B[k] / (2 * (k + 1) * p); p *= x2; }
        return (T)(res + r);
    }
    double r = (fact / n) / pow(x, n) + fact / (2 * pow(x, n + 1));
    double c = 1.0;
    for (int i = 2; i <= n + 1; ++i) c *= i;
    c /= 2;                                   /* (n+1)!/2! */
    for (int k = 1; k <= 7; ++k) {
        if (k > 1) c = c * (2 * k + n - 2) * (2 * k + n - 1) / ((2 * k - 1) * (2.0 * k));
        r += B[k - 1] * c / pow(x, 2 * k + n);
    }
    return (T)(res + sign * r);
}""",
    # SciPy's gammaln(-inf) is -inf (C's lgamma gives +inf)
    "_rt_gammaln": "template <typename T> __host__ __device__ __forceinline__ T "
                   "_rt_gammaln(T x) {\n"
                   "    return isinf(x) && x < T(0) ? x : T(lgamma(x));\n}",
    # np.maximum / np.minimum: a NaN in either argument is the result (C's max drops it)
    "_rt_maximum": "template <typename T> __host__ __device__ __forceinline__ T "
                   "_rt_maximum(T x, T y) {\n"
                   "    return (x != x || x > y) ? x : y;\n}",
    "_rt_minimum": "template <typename T> __host__ __device__ __forceinline__ T "
                   "_rt_minimum(T x, T y) {\n"
                   "    return (x != x || x < y) ? x : y;\n}",
}

# Infinities and NaN have no C literal; these build them from their bits (device intrinsics,
# and memcpy in host code).
_BITS = {
    "_rt_f32_bits": """\
__host__ __device__ __forceinline__ float _rt_f32_bits(unsigned int b) {
#ifdef __CUDA_ARCH__
    return __int_as_float((int)b);
#else
    float f; __builtin_memcpy(&f, &b, sizeof f); return f;
#endif
}""",
    "_rt_f64_bits": """\
__host__ __device__ __forceinline__ double _rt_f64_bits(unsigned long long b) {
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)b);
#else
    double f; __builtin_memcpy(&f, &b, sizeof f); return f;
#endif
}""",
}


class KernelSourceError(ValueError):
    """A kernel could not be written: an op without a C spelling, or an unsupported dtype."""


def ctype(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in CTYPES:
        raise KernelSourceError(f"dtype {name} has no C type in CuPy kernels "
                                f"(supported: {', '.join(CTYPES)}); cast the arguments to "
                                "float32 (x.astype(np.float32)) for the cupy backend")
    return CTYPES[name]


def c_literal(value, dtype) -> str:
    """A C expression of exactly this value and type (only numbers reach this)."""
    dt = np.dtype(dtype)
    v = np.asarray(value).astype(dt).item()
    if dt.kind == "b":
        return "true" if v else "false"
    if dt.kind in "iu":
        return f"(({ctype(dt)}){int(v)})"
    if dt.kind != "f":
        raise KernelSourceError(f"no C literal for dtype {dt}")
    if not np.isfinite(v):
        if dt == np.float32:
            return f"_rt_f32_bits(0x{np.float32(v).view(np.uint32):08x}u)"
        return f"_rt_f64_bits(0x{np.float64(v).view(np.uint64):016x}ull)"
    if dt == np.float32:
        text = str(np.float32(v)) + "f"   # NumPy's shortest repr that round-trips float32
    else:
        text = repr(float(v))
    return f"({text})" if text.startswith("-") else text


# -- scalar programs -------------------------------------------------------------------------
@dataclass
class Instr:
    """One scalar instruction: a registry op over earlier instructions.

    op "input" reads kernel parameter in<attrs['index']>; op "const" is attrs['value'].
    `node` is the IR node it computes, which names its variable (v<node>).
    """
    op: str
    args: tuple
    dtype: np.dtype
    attrs: dict = field(default_factory=dict)
    node: int | None = None


@dataclass
class ScalarProgram:
    """What one kernel computes: `instrs` over `inputs` (dtypes of in0, in1, ...).

    `outputs` are instruction indices written to out0, out1, ... For a reduction, `reduce`
    is {"op": "sum" | "max" | "min", "dtype": accumulator and output dtype} and the single output
    is the value reduced (the fused prologue is everything before it).
    """
    name: str
    inputs: list
    instrs: list
    outputs: list
    reduce: dict | None = None


@dataclass(frozen=True)
class KernelDef:
    """The arguments of cupy.ElementwiseKernel (kind "elementwise") or ReductionKernel."""
    kind: str
    name: str
    in_params: str
    out_params: str
    operation: str              # elementwise: the body; reduction: map_expr
    preamble: str = ""
    reduce_expr: str = ""
    post_map_expr: str = ""
    identity: str = ""
    reduce_type: str = ""       # C type of the accumulator `a`

    def params(self, which="in"):
        """[(dtype, name)] parsed from in_params or out_params."""
        text = self.in_params if which == "in" else self.out_params
        out = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            dt, name = part.split()
            out.append((np.dtype(dt), name))
        return out

    @property
    def digest(self) -> str:
        text = "\0".join([self.kind, self.name, self.in_params, self.out_params,
                          self.operation, self.preamble, self.reduce_expr,
                          self.post_map_expr, self.identity, self.reduce_type])
        return hashlib.sha256(text.encode()).hexdigest()

    def cuda(self) -> str:
        """This kernel alone as a standalone CUDA function (what `Program.kernels` shows)."""
        return _unit(self, 0, "device")


def used_inputs(prog: ScalarProgram) -> ScalarProgram:
    """prog without the inputs its outputs do not read (renumbered in0, in1, ...), and the
    old indices of the inputs kept."""
    live = set(prog.outputs)
    for j in range(len(prog.instrs) - 1, -1, -1):
        if j in live:
            live.update(prog.instrs[j].args)
    kept = sorted(ins.attrs["index"] for j, ins in enumerate(prog.instrs)
                  if ins.op == "input" and j in live)
    new_index = {old: k for k, old in enumerate(kept)}
    instrs = [Instr(ins.op, ins.args, ins.dtype, {"index": new_index.get(ins.attrs["index"])},
                    ins.node) if ins.op == "input" else ins for ins in prog.instrs]
    return ScalarProgram(prog.name, [prog.inputs[k] for k in kept], instrs, prog.outputs,
                         prog.reduce), kept


def _var(ins, j, used):
    name = f"v{ins.node}" if ins.node is not None else f"t{j}"
    while name in used:
        name += "_"
    used.add(name)
    return name


def _statements(prog):
    """C statements computing every instruction; -> (lines, {instr index: C expression})."""
    names, lines, used = {}, [], set()
    live = set(prog.outputs)
    for j in range(len(prog.instrs) - 1, -1, -1):
        if j in live:
            live.update(prog.instrs[j].args)
    for j, ins in enumerate(prog.instrs):
        if j not in live:
            continue   # a value only other outputs of the group need
        if ins.op == "input":
            names[j] = f"in{ins.attrs['index']}"
            continue
        if ins.op == "const":
            names[j] = c_literal(ins.attrs["value"], ins.dtype)
            continue
        opdef = OPS.get(ins.op)
        if opdef is None or opdef.fusion not in ("map", "broadcast") or not opdef.cuda:
            raise KernelSourceError(
                f"op {ins.op!r} has no C spelling for CUDA kernels; give OPS[{ins.op!r}] a "
                "`cuda` entry in ir/ops.py or keep it out of fused groups")
        if opdef.arity is not None and len(ins.args) != opdef.arity:
            raise KernelSourceError(f"{ins.op} takes {opdef.arity} arguments, got {ins.args}")
        ints = {k: v for k, v in (ins.attrs or {}).items()
                if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}
        expr = opdef.cuda.format(*[names[a] for a in ins.args], ctype=ctype(ins.dtype), **ints)
        var = _var(ins, j, used)
        lines.append(f"const {ctype(ins.dtype)} {var} = {expr};")
        names[j] = var
    return lines, names


def _preamble(code):
    """Helper definitions the code uses, in a fixed order."""
    parts = [text for name, text in _BITS.items() if name in code]
    for helper, text in HELPERS.items():
        if re.search(rf"\b{helper}\(", code):
            parts.append(text)
    return "\n".join(parts)


def _params(dtypes, prefix):
    return ", ".join(f"{np.dtype(d).name} {prefix}{k}" for k, d in enumerate(dtypes))


def kernel_def(prog: ScalarProgram) -> KernelDef:
    """The CuPy kernel for a scalar program (elementwise, or a reduction with a prologue)."""
    for d in prog.inputs:
        ctype(d)
    lines, names = _statements(prog)
    ins = _params(prog.inputs, "in")
    if prog.reduce is None:
        out_dtypes = [prog.instrs[o].dtype for o in prog.outputs]
        for d in out_dtypes:
            ctype(d)
        body = lines + [f"out{k} = {names[o]};" for k, o in enumerate(prog.outputs)]
        text = "\n".join(body)
        return KernelDef("elementwise", prog.name, ins, _params(out_dtypes, "out"), text,
                         _preamble(text))
    red = prog.reduce
    acc = np.dtype(red["dtype"])
    (o,) = prog.outputs
    value = names[o] if prog.instrs[o].dtype == acc else f"(({ctype(acc)}){names[o]})"
    reduce_expr = OPS[red["op"]].cuda.format("a", "b")
    identity = c_literal(OPS[red["op"]].reduce_init(acc), acc)   # the registry's identity
    func = ""
    if lines:
        # the fused prologue becomes a function of the inputs, since map_expr is one expression
        args = ", ".join(f"const {ctype(d)} in{k}" for k, d in enumerate(prog.inputs))
        fn = f"_rt_map_{prog.name}"
        body = "\n".join("    " + s for s in lines + [f"return {value};"])
        func = f"__host__ __device__ __forceinline__ {ctype(acc)} {fn}({args}) {{\n{body}\n}}"
        value = f"{fn}({', '.join(f'in{k}' for k in range(len(prog.inputs)))})"
    helpers = _preamble("\n".join([func, value, reduce_expr, identity]))
    preamble = "\n".join(p for p in (helpers, func) if p)
    return KernelDef("reduction", prog.name, ins, _params([acc], "out"), value, preamble,
                     reduce_expr, "out0 = a", identity, ctype(acc))


# -- matrix products inside captured CUDA graphs -------------------------------------------------
# CuPy refuses cuBLAS calls while a stream captures (cupy_backends/cuda/libs/cublas.pyx,
# `setStream` raises NotImplementedError "calling cuBLAS API during stream capture is currently
# unsupported"), so a CUDA-graph program multiplies with this kernel instead: C = A @ B for 2-D
# A (m, k) and B (k, n) of any strides (in elements), C contiguous. Threads run along x over
# C's columns (x_is_row = 0) or rows (1), whichever operand is contiguous there, so a warp's
# loads of it coalesce and its loads of the other are one broadcast; each thread computes an
# R x R block of C (R = 1 for small products, which need every thread they can get), its
# rows and columns strided by the grid's width, no shared memory and no barrier (so the host
# tests run every thread of a grid, cuda_host.host_matmul_kernel).
MATMUL_KERNELS = {("float32", 1): "adjit_matmul_f32_r1", ("float32", 4): "adjit_matmul_f32_r4",
                  ("float64", 1): "adjit_matmul_f64_r1", ("float64", 4): "adjit_matmul_f64_r4"}
MATMUL_SOURCE = """\
template <typename T, int R>
__host__ __device__ __forceinline__ void adjit_matmul_thread(
        const T* a, const T* b, T* c, long long m, long long n, long long k,
        long long sai, long long sak, long long sbk, long long sbj, int x_is_row,
        long long x0, long long y0, long long sx, long long sy) {
    // what thread (x0, y0) of a grid (sx, sy) threads wide computes
    const long long nx = x_is_row ? m : n, ny = x_is_row ? n : m;
    const T* px = x_is_row ? a : b;
    const T* py = x_is_row ? b : a;
    const long long xo = x_is_row ? sai : sbj, xt = x_is_row ? sak : sbk;
    const long long yo = x_is_row ? sbj : sai, yt = x_is_row ? sbk : sak;
    for (long long Y = 0; Y < ny; Y += sy * R) {
        for (long long X = 0; X < nx; X += sx * R) {
            long long xs[R], ys[R];
            bool xin[R], yin[R];
            for (int q = 0; q < R; ++q) { xs[q] = X + x0 + q * sx; xin[q] = xs[q] < nx; }
            for (int r = 0; r < R; ++r) { ys[r] = Y + y0 + r * sy; yin[r] = ys[r] < ny; }
            if (!xin[0] || !yin[0]) continue;   // xs and ys grow: nothing of C is left here
            T acc[R][R];
            for (int r = 0; r < R; ++r)
                for (int q = 0; q < R; ++q) acc[r][q] = T(0);
            for (long long t = 0; t < k; ++t) {
                T xv[R], yv[R];
                for (int q = 0; q < R; ++q) xv[q] = xin[q] ? px[xs[q] * xo + t * xt] : T(0);
                for (int r = 0; r < R; ++r) yv[r] = yin[r] ? py[ys[r] * yo + t * yt] : T(0);
                for (int r = 0; r < R; ++r)
                    for (int q = 0; q < R; ++q) acc[r][q] += yv[r] * xv[q];
            }
            for (int r = 0; r < R; ++r) {
                for (int q = 0; q < R; ++q) {
                    if (yin[r] && xin[q]) {
                        const long long i = x_is_row ? xs[q] : ys[r];
                        const long long j = x_is_row ? ys[r] : xs[q];
                        c[i * n + j] = acc[r][q];
                    }
                }
            }
        }
    }
}

#define ADJIT_MATMUL_KERNEL(NAME, T, R) \\
extern "C" __global__ void NAME(const T* a, const T* b, T* c, long long m, long long n, \\
                                long long k, long long sai, long long sak, long long sbk, \\
                                long long sbj, int x_is_row) { \\
    adjit_matmul_thread<T, R>(a, b, c, m, n, k, sai, sak, sbk, sbj, x_is_row, \\
                              blockIdx.x * (long long)blockDim.x + threadIdx.x, \\
                              blockIdx.y * (long long)blockDim.y + threadIdx.y, \\
                              (long long)blockDim.x * gridDim.x, \\
                              (long long)blockDim.y * gridDim.y); \\
}

ADJIT_MATMUL_KERNEL(adjit_matmul_f32_r1, float, 1)
ADJIT_MATMUL_KERNEL(adjit_matmul_f32_r4, float, 4)
ADJIT_MATMUL_KERNEL(adjit_matmul_f64_r1, double, 1)
ADJIT_MATMUL_KERNEL(adjit_matmul_f64_r4, double, 4)
"""


def matmul_launch(m, n, x_is_row):
    """(kernel R, grid, block) for a C of (m, n): R x R blocks per thread once C is large
    (2**17 elements: about two waves of an H200 at one element a thread), a 32 x 8 block."""
    r = 4 if m * n >= 1 << 17 else 1
    nx, ny = (m, n) if x_is_row else (n, m)
    tx, ty = -(-nx // r), -(-ny // r)
    grid = (min(-(-tx // 32), 2 ** 31 - 1), min(-(-ty // 8), 65535), 1)
    return r, grid, (32, 8, 1)


# -- standalone translation units ------------------------------------------------------------
def symbol(k, d: KernelDef) -> str:
    """The C symbol of kernel number k of a translation unit."""
    return f"adjit_k{k}_{d.name}"


def _indent(text, n):
    return "\n".join((" " * n + s) if s else s for s in text.splitlines())


def _unit(d: KernelDef, k, mode):
    """One kernel as CUDA: CuPy's binding of parameters (typedefs, per-element names)
    around the same body; mode "device" is a __global__ grid-stride loop, "host" a loop."""
    ins, outs = d.params("in"), d.params("out")
    sig = [f"const {ctype(t)}* __restrict__ _rt_{n}" for t, n in ins]
    sig += [f"{ctype(t)}* __restrict__ _rt_{n}" for t, n in outs]
    typedefs = [f"typedef {ctype(t)} {n}_type;" for t, n in ins + outs]
    qual = 'extern "C" __global__ void' if mode == "device" else 'extern "C" void'
    if mode == "device":
        loop = ("for (long long {i} = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                "{i} < {n}; {i} += (long long)blockDim.x * gridDim.x)")
    else:
        loop = "for (long long {i} = 0; {i} < {n}; ++{i})"
    bind_in = [f"const {ctype(t)} {n} = _rt_{n}[i];" for t, n in ins]
    if d.kind == "elementwise":
        sig.append("long long _rt_n")
        bind_out = [f"{ctype(t)} &{n} = _rt_{n}[i];" for t, n in outs]
        inner = "\n".join(bind_in + bind_out + [d.operation])
        body = loop.format(i="i", n="_rt_n") + " {\n" + _indent(inner, 4) + "\n}"
    else:
        sig += ["long long _rt_m", "long long _rt_k"]
        (t_out, n_out), = outs
        typedefs.append(f"typedef {d.reduce_type} type_reduce;")
        step = "\n".join(["const long long i = _rt_j * _rt_k + _rt_r;"] + bind_in + [
            f"const type_reduce b = (type_reduce)({d.operation});",
            f"a = (type_reduce)({d.reduce_expr});"])
        inner = "\n".join([
            f"type_reduce a = (type_reduce)({d.identity});",
            "for (long long _rt_r = 0; _rt_r < _rt_k; ++_rt_r) {",
            _indent(step, 4), "}",
            f"{ctype(t_out)} &{n_out} = _rt_{n_out}[_rt_j];",
            f"{d.post_map_expr};"])
        body = loop.format(i="_rt_j", n="_rt_m") + " {\n" + _indent(inner, 4) + "\n}"
    head = f"// {d.kind} kernel {d.name} (cupy.{d.kind.capitalize()}Kernel)"
    parts = [head, f"namespace adjit_k{k} {{"]
    if d.preamble:
        parts.append(d.preamble)
    parts += typedefs
    parts.append(f"{qual} {symbol(k, d)}({', '.join(sig)}) {{\n{_indent(body, 4)}\n}}")
    parts.append(f"}}  // namespace adjit_k{k}")
    return "\n".join(parts)


def translation_unit(defs, mode="device") -> str:
    """All kernels in one CUDA file, each in its own namespace (helpers may repeat)."""
    return "\n\n".join(["// generated by adjit: CuPy kernels as standalone CUDA"]
                       + [_unit(d, k, mode) for k, d in enumerate(defs)]) + "\n"


def nvcc_path():
    return shutil.which("nvcc")


def compile_unit(source, workdir, mode="ptx", arch="sm_90", optimize=False):
    """Compile a translation unit with nvcc; -> path of the output (.ptx or host .so).

    PTX is not optimized unless asked (5x faster; the front end, which finds what CuPy's
    compiler would reject, runs all the same). Raises KernelSourceError with nvcc's messages
    and the numbered source lines they name.
    """
    os.makedirs(workdir, exist_ok=True)
    digest = hashlib.sha256((mode + arch + str(optimize) + source).encode()).hexdigest()[:16]
    src = os.path.join(workdir, f"adjit_{digest}.cu")
    with open(src, "w") as f:
        f.write(source)
    if mode == "ptx":
        out = src[:-3] + ".ptx"
        cmd = [nvcc_path() or "nvcc", "--ptx", f"-arch={arch}", "-o", out, src]
        if not optimize:
            cmd[2:2] = ["-Xcicc", "-O0"]
    elif mode == "host":
        out = src[:-3] + ".so"
        cmd = [nvcc_path() or "nvcc", "-shared", "-Xcompiler", "-fPIC", "-o", out, src]
    else:
        raise ValueError(mode)
    if os.path.exists(out):
        return out
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise KernelSourceError(_explain(res.stderr + res.stdout, source))
    return out


def _explain(messages, source):
    lines = source.splitlines()
    shown = []
    for m in re.finditer(r"\.cu\((\d+)\)", messages):
        n = int(m.group(1))
        for k in range(max(1, n - 2), min(len(lines), n + 1) + 1):
            shown.append(f"{k:5d}  {lines[k - 1]}")
        if len(shown) > 40:
            break
    return "nvcc failed:\n" + messages.strip() + ("\n\nsource:\n" + "\n".join(shown)
                                                   if shown else "")
