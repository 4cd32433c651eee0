"""`adjit memory`: what gradient checkpointing saves, and costs, as a tanh MLP gets deeper.

Input: depths, width, batch, backend. Output: per depth, one row per schedule (no
checkpointing, "sqrt", a memory budget) with the static estimate and the measurement of the
whole-step peak and of the peak besides the gradients, the step time and the recomputed share
of the forward FLOPs; then the fitted growth exponent, and optionally a plot. With --step the
program is a whole training step (gradient and SGD update) with the parameters donated, so
each update is written into its parameter as soon as its gradient exists and the gradients
never pile up: its peak is the working memory itself.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import time

import numpy as np

import adjit
from adjit.cli import _positive_int  # the command's own argument types
from adjit.ir.errors import BudgetError

MiB = 2 ** 20


def _budget(text):
    if text == "half":
        return text
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of MiB or `half`, got {text!r}") \
            from None
    if not 0 < v < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive number of MiB, got {text}")
    return text


def _depth_list(text):
    try:
        return _depths(text)
    except SystemExit as e:
        raise argparse.ArgumentTypeError(str(e).replace("adjit memory: --depth takes", "expected")
                                         .replace("adjit memory: ", "")) from None


def add_arguments(p: argparse.ArgumentParser):
    p.add_argument("--depth", type=_depth_list, default="16,32,64,128,256",
                   metavar="D1,D2,...", help="numbers of tanh layers to measure")
    p.add_argument("--width", type=_positive_int, default=1024, help="layer width")
    p.add_argument("--batch", type=_positive_int, default=256, help="batch size")
    p.add_argument("--backend", default="numpy", choices=["numpy", "numba", "cupy", "auto"],
                   help="code generator (numpy: tracemalloc sees every array it makes)")
    p.add_argument("--budget", type=_budget, default="half", metavar="MIB|half",
                   help="memory budget in MiB, or `half`: halfway between the whole-step "
                        "peaks of \"sqrt\" and of no checkpointing")
    p.add_argument("--step", action="store_true",
                   help="measure a whole training step (gradient and SGD update, parameters "
                        "donated and updated in place) instead of the gradient alone")
    p.add_argument("--repeat", type=_positive_int, default=3,
                   help="timed steps per schedule (best of)")
    p.add_argument("--plot", metavar="FILE.png", help="plot memory and time against depth")


def tanh_mlp_loss(params, x):
    """The mean square of the last activation of a deep tanh MLP (weights stored (out, in))."""
    h = x
    for i in range(len(params) // 2):
        h = np.tanh(h @ params[f"W{i}"].T + params[f"b{i}"])
    return np.mean(h * h)


def sgd_step(params, x, lr=0.01):
    """A training step: the loss, and the parameters after an SGD update."""
    loss, grads = adjit.value_and_grad(tanh_mlp_loss)(params, x)
    return loss, {k: params[k] - np.float32(lr) * grads[k] for k in params}


def make_inputs(depth, width, batch, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    params = {}
    for i in range(depth):
        params[f"W{i}"] = (rng.normal(size=(width, width)) / math.sqrt(width)).astype(dtype)
        params[f"b{i}"] = np.zeros(width, dtype)
    return params, rng.normal(size=(batch, width)).astype(dtype)


def _device(backend):
    """(to_device, synchronize) for the backend's arrays."""
    if backend == "cupy":
        import cupy
        return cupy.asarray, cupy.cuda.Device().synchronize
    return (lambda a: a), (lambda: None)


def _program(backend, step, **opts):
    if step:    # the parameters' buffers take the updated parameters (CuPy: only in a
        # captured CUDA graph, which this study does not measure; there they are new arrays)
        donate = {} if backend == "cupy" else {"donate_argnums": 0}
        return adjit.compile(sgd_step, backend=backend, **donate, **opts)
    return adjit.grad(tanh_mlp_loss, backend=backend, **opts)


def measure_depth(depth, width, batch, backend="numpy", budget="half", repeat=3, step=False):
    """-> list of row dicts (store-all, sqrt, budget) for one depth; step: of a training
    step with the parameters donated (module docstring) instead of the gradient."""
    to_dev, sync = _device(backend)
    params, x = make_inputs(depth, width, batch)
    params = {k: to_dev(v) for k, v in params.items()}
    x = to_dev(x)
    cases = [("store-all", {}), ("sqrt", {"checkpoint": "sqrt"})]
    progs = {}
    for name, opts in cases:
        f = _program(backend, step, **opts)
        progs[name] = (f, f.lower(params, x))
    if budget == "half":    # rounded up to a whole MiB, as a person would give it
        half = (progs["store-all"][1].memory.peak_bytes + progs["sqrt"][1].memory.peak_bytes) / 2
        limit = math.ceil(half / MiB) * MiB
    else:
        limit = int(float(budget) * MiB)
    note = None
    try:
        f = _program(backend, step, memory_budget=limit)
        progs[f"budget {limit / MiB:.3g} MiB"] = (f, f.lower(params, x))
    except BudgetError as e:     # said in the command's unit; the other rows still stand
        low = re.search(r"at least memory_budget=(\d+)", str(e)) or \
            re.search(r"lowest static peak[a-z ]*?(\d+) bytes", str(e))
        # the advice leaves 256 KiB for what a measured run holds besides the estimate
        need = (f": no schedule goes below {int(low.group(1)) / MiB:.2f} MiB, give --budget "
                f"{math.ceil((int(low.group(1)) + 262144) / MiB * 100) / 100:.2f} or more"
                if low else "")
        note = f"depth {depth}: --budget {limit / MiB:.2f} MiB is too small{need}"
    grads = sum(int(np.prod(v.shape)) * v.dtype.itemsize for v in params.values())
    rows = []
    for name, (f, prog) in progs.items():
        m = prog.memory
        peak = adjit.measure_peak_memory(f, params, x)
        # a step's results are its parameters' own buffers: nothing to set aside
        work = peak if step else adjit.measure_peak_memory(f, params, x, exclude_results=True)
        rows.append({"depth": depth, "schedule": name, "budget": limit if "budget" in name
                     else None, "est_peak": m.peak_bytes,
                     "est_work": m.peak_bytes if step else m.peak_working_bytes,
                     "peak": peak, "work": work,
                     "gradients": grads, "recompute": m.recompute_ratio,
                     "segments": prog.graph.meta.get("checkpoint_plan", {}).get("segments", 1),
                     "times": []})
    for _ in range(repeat):                # interleaved, so drift hits every schedule alike
        for row, (f, _) in zip(rows, progs.values()):
            sync()
            t = time.perf_counter()
            f(params, x)
            sync()
            row["times"].append(time.perf_counter() - t)
    base = rows[0]
    for row in rows:
        row["time"] = min(row["times"])
        row["time_ratio"] = row["time"] / min(base["times"])
        row["work_share"] = row["work"] / base["work"]
        row["peak_share"] = row["peak"] / base["peak"]
    if note:
        rows[-1]["note"] = note
    return rows


def growth_exponent(depths, values) -> float:
    """The exponent a of values ~ depth**a, by least squares on logarithms."""
    return float(np.polyfit(np.log(depths), np.log(values), 1)[0])


def format_rows(rows) -> list:
    head = (f"{'depth':>5}  {'schedule':<15} {'segs':>4}  {'peak MiB':>15}  "
            f"{'besides grads MiB':>17}  {'share':>5}  {'step ms':>8}  {'time':>5}  "
            f"{'recomp.':>7}")
    sub = f"{'':>5}  {'':<15} {'':>4}  {'est':>7} {'meas':>7}  {'est':>8} {'meas':>8}"
    out = [head, sub]
    for r in rows:
        out.append(f"{r['depth']:>5}  {r['schedule']:<15} {r['segments']:>4}  "
                   f"{r['est_peak'] / MiB:>7.1f} {r['peak'] / MiB:>7.1f}  "
                   f"{r['est_work'] / MiB:>8.1f} {r['work'] / MiB:>8.1f}  "
                   f"{100 * r['work_share']:>4.0f}%  {1000 * r['time']:>8.1f}  "
                   f"{r['time_ratio']:>4.2f}x  {100 * r['recompute']:>6.0f}%")
    return out


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, name in enumerate(dict.fromkeys(r["schedule"].split(" ")[0] for r in rows)):
        sel = [r for r in rows if r["schedule"].startswith(name)]
        d = [r["depth"] for r in sel]
        color = f"C{i}"
        ax1.loglog(d, [r["work"] / MiB for r in sel], "o-", color=color,
                   label=f"{name} (measured)")
        ax1.loglog(d, [r["est_work"] / MiB for r in sel], "x--", color=color, alpha=0.6,
                   label=f"{name} (estimated)")
        ax2.plot(d, [r["time_ratio"] for r in sel], "o-", color=color, label=name)
    depths = sorted({r["depth"] for r in rows})
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xticks(depths, [str(d) for d in depths])
        ax.minorticks_off()
    ax1.set_xlabel("depth L (layers)")
    ax1.set_ylabel("peak memory besides gradients (MiB)")
    ax1.legend(fontsize=8)
    ax1.grid(True, which="both", alpha=0.3)
    ax2.set_xlabel("depth L (layers)")
    ax2.set_ylabel("step time / store-all's")
    ax2.legend(fontsize=8)
    ax2.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _depths(text):
    if isinstance(text, list):     # already parsed by --depth's type
        return text
    try:
        ds = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"adjit memory: --depth takes numbers like 16,32,64, got {text!r}")
    if not ds or min(ds) < 2:
        raise SystemExit(f"adjit memory: depths must be at least 2, got {text!r}")
    return ds


def main(args):
    """`adjit memory`; errors the user can fix print one line and return 1."""
    try:
        return _main(args)
    except (adjit.AdjitError, ValueError) as e:    # BudgetError, no CuPy, a bad setting
        print(f"adjit memory: error: {e}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"adjit memory: error: out of memory at width {args.width}, batch {args.batch};"
              " use smaller --depth, --width or --batch", file=sys.stderr)
        return 1


def _main(args):
    depths = sorted(set(_depths(args.depth)))     # each depth once, shallow to deep
    adjit.frontend.api.pick_backend(args.backend)   # fails now if it cannot run here
    if args.plot:
        import importlib.util

        from .commands import check_output_path
        args.plot = check_output_path("--plot", args.plot, plot=True)
        if importlib.util.find_spec("matplotlib") is None:
            # before the table, as adjit mnist does (sweep 29: it failed after the whole run)
            print("adjit memory: --plot needs matplotlib (pip install 'adjit[plot]')",
                  file=sys.stderr)
            return 1
    step = getattr(args, "step", False)
    title = (f"tanh MLP, width {args.width}, batch {args.batch}, float32, "
             f"{args.backend} backend" + (", SGD training step" if step else ""))
    print(f"adjit memory: {title}; time is the best of {args.repeat} interleaved steps")
    if step:
        print("peak = whole training step: gradient and SGD update, the parameters donated "
              "and updated in place as soon as each gradient exists (the besides-grads "
              "columns repeat it); share = of store-all's")
    else:
        print("peak = whole step (gradients included); besides grads = the peak of what is "
              "allocated besides the gradients computed so far; share = of store-all's")
    rows, failed = [], False
    for d in depths:
        part = measure_depth(d, args.width, args.batch, args.backend, args.budget,
                             args.repeat, step)
        lines = format_rows(part)
        print("\n".join(lines if not rows else lines[2:]), flush=True)
        for r in part:
            if r.get("note"):
                print(f"adjit memory: error: {r['note']}", file=sys.stderr, flush=True)
                failed = True
        rows += part
    if len(depths) >= 2:
        for name in ("store-all", "sqrt"):
            sel = [r for r in rows if r["schedule"] == name]
            a = growth_exponent([r["depth"] for r in sel], [r["work"] for r in sel])
            what = "the whole-step peak" if step else "memory besides gradients"
            print(f"{name}: {what} grows like L^{a:.2f} "
                  f"(fit over L = {depths[0]}..{depths[-1]})")
    if args.plot:
        try:
            plot(rows, args.plot, title)
        except ImportError:
            print("adjit memory: --plot needs matplotlib (pip install 'adjit[plot]'); the "
                  "table above is complete", file=sys.stderr)
            return 1
        print(f"saved the plot to {args.plot}")
    return 1 if failed else 0      # a budget no schedule met: the table still stands
