"""One prepared check of the CuPy backend on an NVIDIA GPU (written for an H200, no network).

Usage, from the repository root:
    python benchmarks/gpu_check.py [--data DIR] [--out FILE] [--budget SECONDS]

Sections, each timed and fail-soft (a failing section prints its traceback and the rest run;
a section that would start past its share of --budget is skipped with a row saying so):
  environment   versions, device, whether adjit picks the CuPy backend
  equality      GPU results against the NumPy backend (float32 tolerance): the MLP
                784-256-256-10 gradient, Adam steps with and without a CUDA graph, and (after
                the tests, whose kernels it shares) the op table's values and gradients, for
                as long as its time share lasts
  tests         the GPU tests (pytest -m gpu tests/backends/test_cupy.py) in parallel shards,
                started first (they mostly compile kernels on the CPU), waited for before timing
  epoch         one MNIST training epoch (60,000 samples: the Fashion-MNIST IDX files in
                --data DIR, else synthetic data of that shape), MLP 784-256-256-10, Adam,
                batch 128 and 1024: adjit with and without a CUDA graph, PyTorch eager, and
                torch.compile(mode="reduce-overhead") (a child process started first, so its
                compilation overlaps the tests; it times its epochs when told, last)
  checkpoint    peak GPU memory of a deep MLP's gradient with and without checkpointing
Prints one table last and writes it as JSON to --out after every row (so a run stopped from
outside leaves what it measured; "complete" is true once the table is final). Needs only what
the machine has: Python 3.12, NumPy, CuPy, PyTorch (optional), pytest. Sized to finish in under
5 minutes (--budget 285). The data folder is git-ignored: copy it along (data/fashion-mnist).
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "backends")]
SIZES = [784, 256, 256, 10]
GPU_TESTS = "tests/backends/test_cupy.py"
LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8
START = time.perf_counter()
ROWS = []
OUT = {"path": None, "argv": sys.argv}   # where save() writes the table (after every row)
RESULTS = {}                             # (setting, batch) -> seconds per epoch
SMOKE = {"on": False}                    # --smoke: tiny sizes (CI runs it on hostcupy)


def make_importable():
    """The repository root is the package `adjit`; where it is not installed (the GPU machine
    gets a plain copy), import it through a link named adjit; child processes inherit it."""
    try:
        import adjit
        if os.path.realpath(os.path.dirname(adjit.__file__)) == os.path.realpath(ROOT):
            return
    except ImportError:
        pass
    for name in [m for m in sys.modules if m == "adjit" or m.startswith("adjit.")]:
        del sys.modules[name]
    link_dir = tempfile.mkdtemp(prefix="adjit_path_")
    os.symlink(ROOT, os.path.join(link_dir, "adjit"))
    sys.path.insert(0, link_dir)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [link_dir,
                                                             os.environ.get("PYTHONPATH")]))


def _kernel_cache_dir():
    """CuPy caches compiled kernels under ~/.cupy/kernel_cache (CUPY_CACHE_DIR): use a
    temporary folder when home is not writable; the child processes inherit the choice."""
    if os.environ.get("CUPY_CACHE_DIR"):
        return
    try:
        path = os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError:
        os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupy_kernel_cache_")


def elapsed():
    return time.perf_counter() - START


def row(section, check, value, target="", ok=None, note=""):
    ROWS.append({"section": section, "check": check, "value": value, "target": target,
                 "ok": ok, "note": note})
    flag = "" if ok is None else ("  ok" if ok else "  FAIL")
    print(f"  {check}: {value}{(' (target ' + target + ')') if target else ''}{flag}"
          f"{('  ' + note) if note else ''}", flush=True)
    save()


def save(done=False):
    """Write the rows so far as JSON (atomically), so a run stopped from outside still leaves
    everything measured until then."""
    if not OUT["path"]:
        return
    tmp = OUT["path"] + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump({"rows": ROWS, "seconds": elapsed(), "complete": done,
                       "argv": OUT["argv"]}, f, indent=1, default=str)
        os.replace(tmp, OUT["path"])
    except OSError as e:
        print(f"  (cannot write {OUT['path']}: {e})", flush=True)


def section(name, fn, *args, until=None):
    """Run one section, fail-soft; skipped when the clock is already past `until` seconds."""
    print(f"\n== {name} (at {elapsed():.0f} s)", flush=True)
    if until is not None and elapsed() > until:
        row(name, f"{getattr(fn, '__name__', name)}", f"skipped: {elapsed():.0f} s gone, "
            f"the budget leaves it none (limit {until:.0f} s)", ok=None)
        return
    t = time.perf_counter()
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - fail soft: report and go on to the next section
        traceback.print_exc()
        row(name, getattr(fn, "__name__", "section"), "raised (traceback above)", ok=False)
    print(f"-- {name}: {time.perf_counter() - t:.1f} s", flush=True)


# -- the model, as a user writes it -------------------------------------------------------------
def init_params(seed=0):
    """PyTorch's nn.Linear initialization, weights stored (out, in)."""
    rng = np.random.default_rng(seed)
    p = {}
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:]), 1):
        bound = 1 / np.sqrt(a)
        p[f"W{i}"] = rng.uniform(-bound, bound, size=(b, a)).astype(np.float32)
        p[f"b{i}"] = rng.uniform(-bound, bound, size=b).astype(np.float32)
    return p


def mlp_loss(params, X, y):
    """The GPU tests' MLP loss (tests/backends/programs.py), written as
    adjit.nn.softmax_cross_entropy is: one-hot targets, so the loss and its vjp fuse.
    Imported here, after make_importable(), since programs.py imports adjit."""
    from programs import mlp_loss_one_hot
    return mlp_loss_one_hot(params, X, y)


def adam_init(params):
    from programs import adam_init as init
    return init(params)


def train_step(params, state, X, y):
    """Loss, gradient and Adam update in one program (PyTorch's Adam, same arithmetic)."""
    import adjit
    loss, grads = adjit.value_and_grad(mlp_loss)(params, X, y)
    t = state["t"] + 1
    step_size = LR / (1 - B1 ** t)
    bc2 = np.sqrt(1 - B2 ** t)
    new_p, new_m, new_v = {}, {}, {}
    for k in params:
        g = grads[k]
        m = B1 * state["m"][k] + (1 - B1) * g
        v = B2 * state["v"][k] + (1 - B2) * g * g
        new_p[k] = params[k] - step_size * m / (np.sqrt(v) / bc2 + EPS)
        new_m[k], new_v[k] = m, v
    return loss, new_p, {"t": t, "m": new_m, "v": new_v}


def load_data(folder):
    """(X float32 (60000, 784) in [0, 1], y int64, name): the train-images / train-labels IDX
    files found anywhere under folder (raw or .gz), else synthetic data of the same shape."""
    if not folder:
        rng = np.random.default_rng(0)
        return rng.random((60000, 784), dtype=np.float32), rng.integers(0, 10, 60000), \
            "synthetic (60,000 x 784)"
    found = {}
    for root, _, files in sorted(os.walk(folder)):
        for f in sorted(files):
            for kind in ("train-images", "train-labels"):
                if kind in f and kind not in found:
                    found[kind] = os.path.join(root, f)
    if len(found) < 2:
        raise FileNotFoundError(f"{folder}: no train-images and train-labels IDX files "
                                f"(found {sorted(found.values())})")
    X, y = _read_idx(found["train-images"]), _read_idx(found["train-labels"])
    if X.dtype != np.uint8 or len(X) != len(y) or X[0].size != 784:
        raise ValueError(f"{folder}: {X.shape} images and {y.shape} labels are not MNIST-like")
    return X.reshape(len(X), 784).astype(np.float32) / np.float32(255), y.astype(np.int64), \
        f"Fashion-MNIST, {found['train-images']}"


def _read_idx(path):
    """An IDX array (uint8 data): magic 0x0000080N, N big-endian int32 sizes, the bytes."""
    import gzip
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    if data[:3] != b"\0\0\x08":
        raise ValueError(f"{path}: not an IDX file of uint8 (magic {data[:4].hex()})")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


# -- sections ------------------------------------------------------------------------------------
def environment():
    import cupy
    import adjit
    from adjit.backends import cupy_backend, registry
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    row("environment", "device", f"{name}, {props['totalGlobalMem'] / 2**30:.0f} GiB")
    row("environment", "versions", f"Python {platform.python_version()}, NumPy "
        f"{np.__version__}, CuPy {cupy.__version__}, CUDA runtime "
        f"{cupy.cuda.runtime.runtimeGetVersion()}, adjit {adjit.__version__}")
    try:
        import torch
        row("environment", "torch", f"{torch.__version__}, cuda {torch.version.cuda}")
    except ImportError:
        row("environment", "torch", "not installed: the PyTorch rows are skipped")
    why = cupy_backend.why_unusable()
    row("environment", "cupy backend usable", "yes" if why is None else why, ok=why is None)
    row("environment", "backend='auto' picks", registry.resolve("auto").NAME,
        target="cupy", ok=registry.resolve("auto").NAME == "cupy")


def _errors(got, want, absolute=False):
    """(pointwise, normwise) error over all leaves: max |a - b| / (1 + |b|), the tests'
    assert_allclose(rtol=tol, atol=tol) criterion; and per leaf max |a - b| / max |b|.
    With absolute: max |a - b| over all leaves."""
    from adjit.frontend import pytree
    point = norm = worst = 0.0
    def host(x):   # either side may be on the GPU (a CuPy array refuses np.asarray)
        return (x.get() if hasattr(x, "get") else np.asarray(x)).astype(np.float64)
    for a, b in zip(pytree.flatten(got)[0], pytree.flatten(want)[0]):
        a, b = host(a), host(b)
        if not b.size:
            continue
        d = np.abs(a - b)
        worst = max(worst, float(d.max()))
        point = max(point, float((d / (1 + np.abs(b))).max()))
        norm = max(norm, float(d.max() / max(np.abs(b).max(), 1e-30)))
    return worst if absolute else (point, norm)


def equality_op_table(until=None):
    """After the GPU tests (which check every case, float32 fused and float64 unfused): a
    summary row; stops taking new cases once the clock passes `until` seconds."""
    import adjit
    from optable import cases, make_inputs
    worst, count, failed, all_cases = 0.0, 0, [], list(cases())
    if SMOKE["on"]:
        all_cases = all_cases[::len(all_cases) // 4][:4]   # a few, spread over the table
    for name, k, fn, spec in all_cases:
        if until is not None and elapsed() > until:
            break
        count += 1
        try:
            xs = make_inputs(spec, k, np.float32)
            c = np.random.default_rng(7).normal(size=np.shape(fn(*xs))).astype(np.float32)

            def objective(*a, fn=fn, c=c):
                out = fn(*a)
                return np.sum(out * c), out
            nums = tuple(range(len(xs)))
            want = adjit.value_and_grad(objective, argnums=nums, has_aux=True,
                                        backend="numpy")(*xs)
            got = adjit.value_and_grad(objective, argnums=nums, has_aux=True,
                                       backend="cupy")(*xs)
            err = _errors(got, want)[0]
        except Exception as e:  # noqa: BLE001 - one case's failure is reported, not fatal
            failed.append(f"{name}-{k} ({type(e).__name__}: {str(e)[:80]})")
            if count >= 5 and len(failed) == count:
                failed.append("stopped: the first five cases all raised")
                break
            continue
        worst = max(worst, err)
        if not err <= 2e-5:
            failed.append(f"{name}-{k}")
    row("equality", f"op table, values and gradients ({count} of {len(all_cases)} cases, "
        "float32, fused)", f"max err {worst:.1e}", "<= 2e-5", not failed and count > 0,
        ", ".join(failed[:8]) + ("" if count == len(all_cases) else
                                 f"; stopped early (time limit {until} s)"))


def equality_models():
    import cupy
    import adjit
    X, y, _ = load_data(None)
    X, y = X[:128], y[:128]
    p = init_params()
    want = adjit.value_and_grad(mlp_loss, backend="numpy")(p, X, y)
    got = adjit.value_and_grad(mlp_loss, backend="cupy")(p, cupy.asarray(X), cupy.asarray(y))
    err = _errors(got, want)[0]
    row("equality", "MLP 784-256-256-10 loss and gradient, batch 128", f"max err {err:.1e}",
        "<= 1e-4", err <= 1e-4)
    for graph in (False, True):
        ref = adjit.compile(train_step, backend="numpy")
        step = adjit.compile(train_step, backend="cupy", cuda_graph=graph,
                             donate_argnums=(0, 1) if graph else ())
        s_ref, s_gpu = (p, adam_init(p)), (p, adam_init(p))
        err = steps = 0.0
        for _ in range(3):
            o_ref = ref(*s_ref, X, y)
            o_gpu = step(*s_gpu, cupy.asarray(X), cupy.asarray(y))
            # the loss and Adam's moments normwise; the weights in units of one Adam step
            # (LR): Adam divides by sqrt(v), so float32 rounding in a near-zero gradient
            # moves a weight by a few percent of a step, whatever the weight's size
            err = max(err, _errors((o_gpu[0], o_gpu[2]), (o_ref[0], o_ref[2]))[1])
            steps = max(steps, _errors(o_gpu[1], o_ref[1], absolute=True) / LR)
            s_ref, s_gpu = o_ref[1:], o_gpu[1:]
        mode = step.lower(*s_gpu, cupy.asarray(X), cupy.asarray(y)).fn
        note = "loss and moments normwise per array; weights within a share of one Adam step"
        if graph:
            note = f"runner mode: {mode.mode}; " + note
        row("equality", f"3 Adam steps {'with' if graph else 'without'} a CUDA graph",
            f"max err {err:.1e}, weights {steps:.1%} of a step", "<= 1e-3, <= 10%",
            err <= 1e-3 and steps <= 0.1 and (not graph or mode.mode == "graph"), note)


class AdjitTrainer:
    """A training epoch with adjit: data on the GPU, batches drawn there; with a CUDA graph,
    batches are gathered straight into the captured program's input buffers."""

    def __init__(self, Xg, yg, batch, graph):
        import cupy
        import adjit
        self.cp, self.Xg, self.yg, self.batch, self.graph = cupy, Xg, yg, batch, graph
        p = init_params()
        self.params = {k: cupy.asarray(v) for k, v in p.items()}
        self.state = {"t": cupy.zeros((), np.float32),
                      "m": {k: cupy.zeros_like(v) for k, v in self.params.items()},
                      "v": {k: cupy.zeros_like(v) for k, v in self.params.items()}}
        step = adjit.compile(train_step, backend="cupy", cuda_graph=graph,
                             donate_argnums=(0, 1) if graph else ())
        xb, yb = Xg[:batch], yg[:batch]
        t = time.perf_counter()
        self.prog = step.lower(self.params, self.state, xb, yb)
        self.loss, self.params, self.state = self.prog(self.params, self.state, xb, yb)
        cupy.cuda.Device().synchronize()
        self.compile_s = time.perf_counter() - t
        self.kernels = len(self.prog.kernels)
        if graph:
            from adjit.frontend import pytree
            k = len(pytree.flatten((self.params, self.state))[0])   # X's position among leaves
            self.bufs = self.prog.fn.static_inputs[k], self.prog.fn.static_inputs[k + 1]

    def epoch(self, seed):
        cp, B = self.cp, self.batch
        n = len(self.Xg)
        steps = n // B                                  # the last partial batch is dropped
        perm = cp.asarray(np.random.default_rng(seed).permutation(n))
        total = cp.zeros((), cp.float32)
        params, state = self.params, self.state
        for s in range(steps):
            idx = perm[s * B:(s + 1) * B]
            if self.graph:
                xb, yb = self.bufs
                cp.take(self.Xg, idx, axis=0, out=xb)
                cp.take(self.yg, idx, axis=0, out=yb)
            else:
                xb, yb = cp.take(self.Xg, idx, axis=0), cp.take(self.yg, idx, axis=0)
            loss, params, state = self.prog(params, state, xb, yb)
            total += loss
        self.params, self.state = params, state
        return float(total) / steps


def _time_epochs(run, epochs, sync):
    run(0)                                              # warm-up epoch: capture, autotuning
    sync()
    times, loss = [], None
    for e in range(1, epochs + 1):
        t = time.perf_counter()
        loss = run(e)
        sync()
        times.append(time.perf_counter() - t)
    return min(times), loss


def torch_trainer(X, y, batch, compiled, device="cuda"):
    """A closure running one PyTorch epoch (same data on the GPU, same init, same Adam)."""
    import torch
    import torch.nn.functional as F
    Xt, yt = torch.as_tensor(X, device=device), torch.as_tensor(y, device=device)
    p = init_params()
    layers = []
    for i in range(1, len(SIZES)):
        lin = torch.nn.Linear(SIZES[i - 1], SIZES[i])
        with torch.no_grad():
            lin.weight.copy_(torch.as_tensor(p[f"W{i}"]))
            lin.bias.copy_(torch.as_tensor(p[f"b{i}"]))
        layers += [lin, torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(B1, B2), eps=EPS)
    fwd, opt_step = model, opt.step
    if compiled:
        fwd = torch.compile(model, mode="reduce-overhead")
        opt_step = torch.compile(opt.step, mode="reduce-overhead")

    def step(xb, yb):
        if compiled:
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(xb), yb)
        loss.backward()
        opt_step()
        return loss.detach()

    def epoch(seed, limit=None):
        n = len(Xt)
        steps = n // batch if limit is None else min(limit, n // batch)
        g = torch.Generator(device=device).manual_seed(seed)
        perm = torch.randperm(n, device=device, generator=g)
        total = torch.zeros((), device=device)
        for s in range(steps):
            idx = perm[s * batch:(s + 1) * batch]
            total += step(Xt.index_select(0, idx), yt.index_select(0, idx))
        return float(total) / steps
    return epoch


def epochs(args):
    import cupy
    try:
        X, y, name = load_data(args.data)
    except (OSError, ValueError) as e:
        print(f"  cannot read --data ({e}); timing on synthetic data of the same shape")
        X, y, name = load_data(None)
    row("epoch", "data", name, note=f"batch 128: {len(X) % 128} and batch 1024: "
        f"{len(X) % 1024} samples of the last partial batch are dropped (static shapes)")
    if SMOKE["on"]:
        X, y = X[:1024], y[:1024]
    Xg, yg = cupy.asarray(X), cupy.asarray(y)         # moved to the GPU once
    results = RESULTS
    sync = cupy.cuda.Device().synchronize
    for batch in ((128,) if SMOKE["on"] else (128, 1024)):
        for graph in (True, False):
            key = f"adjit{' + CUDA graph' if graph else ''}"
            try:
                tr = AdjitTrainer(Xg, yg, batch, graph)
                secs, loss = _time_epochs(tr.epoch, args.epochs, sync)
            except Exception:  # noqa: BLE001 - the other settings still run
                traceback.print_exc()
                row("epoch", f"{key}, batch {batch}", "raised (traceback above)", ok=False)
                continue
            mode = getattr(tr.prog.fn, "mode", None)
            results[(key, batch)] = secs
            row("epoch", f"{key}, batch {batch}", f"{secs:.3f} s/epoch "
                f"({len(X) // batch * batch / secs:,.0f} samples/s)",
                ok=(mode == "graph") if graph else None,
                note=f"loss {loss:.3f}; build {tr.compile_s:.1f} s, {tr.kernels} kernels"
                     + (f"; runner mode {mode}" if graph else ""))
    try:
        import torch
    except ImportError:
        row("epoch", "PyTorch", "not installed: no comparison")
        return results
    if not torch.cuda.is_available():
        row("epoch", "PyTorch", "no CUDA device in this PyTorch: no comparison",
            ok=None if SMOKE["on"] else False)
        return results
    for batch in (128, 1024):
        try:
            run = torch_trainer(X, y, batch, compiled=False)
            secs, loss = _time_epochs(run, args.epochs, torch.cuda.synchronize)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            row("epoch", f"torch eager, batch {batch}", "raised (traceback above)", ok=False)
            continue
        results[("torch eager", batch)] = secs
        row("epoch", f"torch eager, batch {batch}", f"{secs:.3f} s/epoch "
            f"({len(X) // batch * batch / secs:,.0f} samples/s)", note=f"loss {loss:.3f}")
    return results


def torch_compile_section(args):
    """The torch.compile child's timings (it compiled while the rest ran), then the verdicts."""
    for r in finish_torch_compile(args.torch_compile, args.budget):
        RESULTS[("torch.compile", r["batch"])] = r["secs"]
    _verdicts(RESULTS)


def _verdicts(results):
    g = results.get
    a128, e128, c128 = g(("adjit + CUDA graph", 128)), g(("torch eager", 128)), \
        g(("torch.compile", 128))
    if a128 and e128:
        row("epoch", "batch 128: speed-up over torch eager", f"{e128 / a128:.2f}x", ">= 2x",
            e128 / a128 >= 2)
    if a128 and c128:
        row("epoch", "batch 128: against torch.compile reduce-overhead", f"{c128 / a128:.2f}x",
            ">= 1x (no slower)", c128 / a128 >= 1)
    a1k = g(("adjit + CUDA graph", 1024))
    best = min([v for v in (g(("torch eager", 1024)), g(("torch.compile", 1024))) if v] or [0])
    if a1k and best:
        row("epoch", "batch 1024: time against the better PyTorch", f"{a1k / best:.2f}x",
            "<= 1.2x", a1k / best <= 1.2)


def child_torch_compile(args):
    """Run in a child process, started first so that compiling (CPU time, 30-60 s a model)
    overlaps the tests; it warms both batch sizes up, then waits for a line on stdin (the
    parent's go, once the GPU is free) before the timed epochs, so timings do not overlap."""
    import torch
    try:
        X, y, _ = load_data(args.data)
    except (OSError, ValueError):
        X, y, _ = load_data(None)
    runs = []
    for batch in (128, 1024):
        t = time.perf_counter()
        run = torch_trainer(X, y, batch, compiled=True)
        run(0, limit=5)          # compiles and records the CUDA graphs; little GPU time
        torch.cuda.synchronize()
        runs.append((batch, run, time.perf_counter() - t))
        print(json.dumps({"ready": batch, "warmup": runs[-1][2]}), flush=True)
    sys.stdin.readline()
    for batch, run, warm in runs:
        secs, loss = _time_epochs(run, args.epochs, torch.cuda.synchronize)
        print(json.dumps({"batch": batch, "secs": secs, "loss": loss, "warmup": warm,
                          "rate": len(X) // batch * batch / secs}), flush=True)


def start_torch_compile(args):
    """Start child_torch_compile (None when PyTorch is missing); its output goes to files, so
    nothing blocks on a full pipe."""
    import importlib.util
    if importlib.util.find_spec("torch") is None or SMOKE["on"]:
        return None
    logs = tempfile.mkdtemp(prefix="adjit_torch_compile_")
    out = open(os.path.join(logs, "stdout"), "w+")
    err = open(os.path.join(logs, "stderr"), "w+")
    cmd = [sys.executable, os.path.abspath(__file__), "--child-torch-compile",
           "--epochs", str(args.epochs)] + (["--data", args.data] if args.data else [])
    # a few compile workers: the test shards need the CPUs more while both run
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS=os.environ.get(
        "TORCHINDUCTOR_COMPILE_THREADS", "4"))
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=out, stderr=err,
                            text=True, env=env)
    return {"proc": proc, "out": out, "err": err, "start": time.perf_counter()}


def finish_torch_compile(tc, budget):
    """Tell the child to time its epochs, wait for it within the budget; -> its results."""
    name = "torch.compile(mode='reduce-overhead')"
    if tc is None:
        row("epoch", name, "not run (no PyTorch, or not started)")
        return []
    proc = tc["proc"]
    try:
        proc.stdin.write("go\n")
        proc.stdin.flush()
        proc.stdin.close()
    except OSError:
        pass                                    # the child has already ended: see its output
    limit = max(15.0, budget - 10 - elapsed())
    try:
        proc.wait(timeout=limit)
        stopped = False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        stopped = True
    tc["out"].seek(0)
    lines = [json.loads(ln) for ln in tc["out"].read().splitlines() if ln.startswith("{")]
    done = [r for r in lines if "secs" in r]
    for r in done:
        row("epoch", f"torch.compile reduce-overhead, batch {r['batch']}",
            f"{r['secs']:.3f} s/epoch ({r['rate']:,.0f} samples/s)",
            note=f"loss {r['loss']:.3f}; compile and warm-up {r['warmup']:.0f} s")
    ready = [r["ready"] for r in lines if "ready" in r]
    if stopped:
        row("epoch", name, f"stopped at {elapsed():.0f} s (compiled batches {ready}); rows "
            "above are what finished")
    elif proc.returncode != 0 or len(done) < 2:
        tc["err"].seek(0)
        print(tc["err"].read()[-3000:])
        row("epoch", name, f"child exited {proc.returncode} with {len(done)} results (its "
            "stderr above)", ok=False)
    print(f"  (torch.compile child: {time.perf_counter() - tc['start']:.0f} s since its start)")
    return done


def checkpoint_memory():
    """A deep MLP whose activations dominate: all of its memory and the working memory
    (less the gradients already computed), measured on the CuPy pool."""
    import cupy
    import adjit
    depth, width, batch = (8, 128, 256) if SMOKE["on"] else (32, 512, 4096)
    rng = np.random.default_rng(0)
    ws = [(rng.normal(size=(width, width)) / np.sqrt(width)).astype(np.float32)
          for _ in range(depth)]

    def loss(ws, X):
        h = X
        for W in ws:
            h = np.tanh(h @ W)
        return np.mean(h * h)
    args = ([cupy.asarray(w) for w in ws], cupy.asarray(rng.normal(size=(batch, width))
                                                        .astype(np.float32)))
    out = {}
    for ck in (None, "sqrt"):
        f = adjit.value_and_grad(loss, backend="cupy", checkpoint=ck)
        peak = adjit.measure_peak_memory(f, *args)
        work = adjit.measure_peak_memory(f, *args, exclude_results=True)
        mem = f.lower(*args).memory
        out[ck] = (peak, work, f(*args))
        row("checkpoint", f"MLP depth {depth}, width {width}, batch {batch}: "
            f"checkpoint={ck}", f"peak {peak / 2**20:.0f} MiB, working {work / 2**20:.0f} MiB",
            note=f"static estimate {mem.peak_bytes / 2**20:.0f} MiB, working "
                 f"{mem.peak_working_bytes / 2**20:.0f} MiB; {mem}")
    ratio = out["sqrt"][1] / max(out[None][1], 1)
    err = _errors(out["sqrt"][2], out[None][2])[0]
    row("checkpoint", "sqrt checkpointing: working memory ratio", f"{ratio:.2f}", "< 1",
        ratio < 1 and err < 1e-5, note=f"total peak ratio "
        f"{out['sqrt'][0] / max(out[None][0], 1):.2f}; gradients agree to {err:.1e}")


def start_gpu_tests():
    """The GPU tests in child processes (shards), started first: they mostly compile kernels
    on the CPU, so they run in parallel while the equality checks do, and are waited for
    before anything is timed. Their output goes to files: a pipe nobody reads until the end
    would fill up (64 KiB of tracebacks) and stop the shard."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 2
    # NVRTC compiles (~0.1-0.5 s a kernel, ~2,000 kernels cold) dominate: one shard a core,
    # leaving some for this process and the torch.compile child
    shards = max(1, min(10, cpus - 5))
    logs = tempfile.mkdtemp(prefix="adjit_gpu_tests_")
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "--tb=short", "-p",
           "no:cacheprovider", GPU_TESTS]
    procs = []
    for k in range(shards):
        log = open(os.path.join(logs, f"shard{k}.txt"), "w+")
        proc = subprocess.Popen(cmd + ["--shard", f"{k}/{shards}"], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, text=True)
        proc.log = log
        procs.append(proc)
    return procs


def finish_gpu_tests(procs, deadline):
    counts, failed, outputs = {}, False, []
    for k, proc in enumerate(procs):
        note = ""
        try:
            proc.wait(timeout=max(5, deadline - elapsed()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            note = f"\nshard {k}: not done at {deadline:.0f} s: stopped"
            failed = True
        failed |= proc.returncode != 0
        proc.log.seek(0)
        out = proc.log.read() + note
        outputs.append(out)
        summary = out.strip().splitlines()[-1] if out.strip() else ""
        for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary):
            counts[what] = counts.get(what, 0) + int(n)
    if failed:
        for k, out in enumerate(outputs):
            print(f"--- shard {k}/{len(procs)}\n" + "\n".join(out.strip().splitlines()[-60:]))
    summary = ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "no output"
    row("tests", f"pytest -m gpu {GPU_TESTS} ({len(procs)} shards)", summary, "all pass",
        not failed and counts.get("passed", 0) > 0)


def table():
    print("\n" + "=" * 100)
    print(f"{'section':<12}{'check':<58}{'value':<30}")
    for r in ROWS:
        flag = "" if r["ok"] is None else ("ok" if r["ok"] else "FAIL")
        target = f" [{r['target']}]" if r["target"] else ""
        print(f"{r['section']:<12}{r['check'][:57]:<58}{r['value']}{target} {flag}")
        if r["note"]:
            print(f"{'':<14}{r['note']}")
    print(f"total {elapsed():.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="folder with the Fashion-MNIST (or MNIST) IDX files")
    ap.add_argument("--out", default="gpu_check.json", help="where to write the table (JSON)")
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per setting (best)")
    ap.add_argument("--budget", type=float, default=285, help="seconds for the whole run")
    ap.add_argument("--only", help="comma-separated sections to run (default: all): "
                    "environment, equality, tests, epoch, checkpoint")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes, no PyTorch and no test shards: a check of the script "
                    "itself (CI runs it on tests/backends/hostcupy, CuPy's interface on the host)")
    ap.add_argument("--child-torch-compile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    SMOKE["on"] = args.smoke
    make_importable()
    _kernel_cache_dir()
    if args.child_torch_compile:
        return child_torch_compile(args)
    OUT["path"] = args.out
    only = set(args.only.split(",")) if args.only else None

    def wanted(name):
        return only is None or name in only
    B = args.budget
    tests = start_gpu_tests() if wanted("tests") and not args.smoke else None
    args.torch_compile = start_torch_compile(args) if wanted("epoch") else None
    plan = [("environment", environment, (), None),
            ("equality", equality_models, (), 0.4 * B),
            ("tests", finish_gpu_tests, (tests, 0.5 * B), None),
            ("equality", equality_op_table, (0.6 * B,), 0.55 * B),
            ("epoch", epochs, (args,), 0.75 * B),
            ("checkpoint", checkpoint_memory, (), 0.85 * B),
            ("epoch", torch_compile_section, (args,), None)]
    try:
        for name, fn, fargs, until in plan:
            if wanted(name) and not (fn is finish_gpu_tests and tests is None):
                section(name, fn, *fargs, until=until)
    finally:
        for proc in (tests or []) + ([args.torch_compile["proc"]] if args.torch_compile
                                     else []):
            if proc.poll() is None:
                proc.kill()
        table()
        save(done=True)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
