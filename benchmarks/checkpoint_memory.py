"""Gradient checkpointing against peers: a deep tanh MLP, each case in a fresh process.

    python benchmarks/checkpoint_memory.py [--depths 16,64,256] [--plot docs/checkpoint_memory.png]

Cases: adjit (NumPy backend) with no checkpointing, "sqrt" and a memory budget; PyTorch
store-all and torch.utils.checkpoint.checkpoint_sequential with sqrt(L) segments
(use_reentrant=False); JAX store-all and jax.checkpoint on blocks of sqrt(L) layers, both
under jax.jit. Width 1024, float32, loss mean(h * h); weights (out, in).

Memory: each case in a fresh interpreter with MALLOC_MMAP_THRESHOLD_=65536, so that every
buffer of 64 KiB or more is its own mapping and the resident set follows what is alive. Time:
the schedules of one framework in one fresh interpreter, interleaved, best of --repeat steps;
with --threads 1 (the default) pinned to one core and measured in CPU time, which the other
work of a shared machine does not inflate. Memory is peak RSS
above the baseline taken after the weights, the input and one warm-up step (VmHWM, reset
through /proc/self/clear_refs):
  step   the whole step, gradients allocated during it (as every framework does by default);
  kept   resident after the forward, before the backward (PyTorch); JAX: bytes of the
         residuals jax.vjp keeps under jit; adjit: the static estimate at that point;
  work   the peak besides parameters and gradients: PyTorch with gradients kept from the
         warm-up (backward accumulates into them); adjit: measure_peak_memory(...,
         exclude_results=True). JAX's jit gives no such split.
With --train, the big-batch run also measures whole training steps (gradient and an SGD
update, lr 1e-4): adjit compiles `sgd_step` with the parameters donated, so each update is
written into its parameter as soon as its gradient exists; PyTorch runs backward() and then
optimizer.step() ("step-"), and, as its tutorial on fusing the optimizer into the backward
does, updates each parameter from a post-accumulate-grad hook and drops its gradient
("hook-"); JAX jits the step with the parameters donated.
Prints a Markdown table; never asserts.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np

MiB = 2 ** 20
WIDTH = 1024


# -- measurement inside one process -----------------------------------------------------------
def _status(key):
    with open("/proc/self/status") as f:
        return int(re.search(rf"{key}:\s+(\d+) kB", f.read()).group(1)) * 1024


def _reset_peak():
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def _peak_above(base):
    return _status("VmHWM") - base


def _inputs(depth, batch, seed=0):
    rng = np.random.default_rng(seed)
    ws = [(rng.normal(size=(WIDTH, WIDTH)) / math.sqrt(WIDTH)).astype(np.float32)
          for _ in range(depth)]
    bs = [np.zeros(WIDTH, np.float32) for _ in range(depth)]
    return ws, bs, rng.normal(size=(batch, WIDTH)).astype(np.float32)


def _segments(depth):
    return max(1, round(math.sqrt(depth)))


LR = 1e-4


def sgd_step(params, x):
    """One training step: the loss and the parameters after an SGD update."""
    import adjit
    from adjit.nn.memory_study import tanh_mlp_loss
    loss, grads = adjit.value_and_grad(tanh_mlp_loss)(params, x)
    return loss, {k: params[k] - np.float32(LR) * grads[k] for k in params}


def _schedule(mode):
    """("none" | "sqrt" | "budget=<bytes>") -> compile options."""
    opts = {"none": {}, "sqrt": {"checkpoint": "sqrt"}}.get(mode)
    return opts if opts is not None else {"memory_budget": int(mode.split("=")[1])}


def adjit_case(modes, depth, batch):
    """-> {mode: (step, memory probe)} for adjit's NumPy backend."""
    import adjit
    from adjit.nn.memory_study import tanh_mlp_loss
    ws, bs, x = _inputs(depth, batch)
    params = {f"W{i}": w for i, w in enumerate(ws)}
    params.update({f"b{i}": b for i, b in enumerate(bs)})
    out = {}
    for mode in modes:
        if mode.startswith("step-"):       # the parameters are updated in their own buffers
            f = adjit.compile(sgd_step, backend="numpy", donate_argnums=(0,),
                              **_schedule(mode[5:]))
        else:
            f = adjit.grad(tanh_mlp_loss, backend="numpy", **_schedule(mode))
        f(params, x)
        out[mode] = (lambda f=f: f(params, x), lambda f=f: _adjit_memory(f, params, x))
    return out


def _adjit_memory(f, params, x):
    import adjit
    prog = f.lower(params, x)
    m = prog.memory
    first_back = next(i for i, n in enumerate(m.steps)
                      if (prog.graph[n]["where"] is not None
                          and prog.graph[n]["where"].role.startswith("vjp")))
    base = _reset_peak()
    out = f(params, x)
    step = _peak_above(base)
    del out
    return {"step": step, "kept": m.live_bytes[first_back - 1], "kept_source": "estimate",
            "work": adjit.measure_peak_memory(f, params, x, exclude_results=True),
            "est_step": m.peak_bytes, "est_work": m.peak_working_bytes,
            "recompute": m.recompute_ratio,
            "segments": prog.graph.meta.get("checkpoint_plan", {}).get("segments", 1)}


def torch_case(modes, depth, batch):
    import torch
    from torch.utils.checkpoint import checkpoint_sequential
    torch.manual_seed(0)
    ws, bs, x = _inputs(depth, batch)
    layers = []
    for w, b in zip(ws, bs):
        lin = torch.nn.Linear(WIDTH, WIDTH)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        layers += [lin, torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers)
    xt = torch.from_numpy(x)

    opt = torch.optim.SGD(model.parameters(), lr=LR)
    hooked = []

    def update_in_backward(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-LR)
        p.grad = None

    def forward(mode):
        if mode.endswith("sqrt"):
            h = checkpoint_sequential(model, _segments(depth), xt, use_reentrant=False)
        else:
            h = model(xt)
        return (h * h).mean()

    def step(mode):
        model.zero_grad(set_to_none=True)
        if mode.startswith("hook-") and not hooked:
            hooked.extend(p.register_post_accumulate_grad_hook(update_in_backward)
                          for p in model.parameters())
        forward(mode).backward()
        if mode.startswith("step-"):
            opt.step()

    def memory(mode):
        model.zero_grad(set_to_none=True)
        base = _reset_peak()
        loss = forward(mode)
        kept = _status("VmRSS") - base
        if mode.startswith("hook-") and not hooked:
            hooked.extend(p.register_post_accumulate_grad_hook(update_in_backward)
                          for p in model.parameters())
        loss.backward()
        if mode.startswith("step-"):
            opt.step()
        whole = _peak_above(base)
        del loss
        if mode[:5] in ("step-", "hook-"):
            return {"step": whole, "kept": kept, "kept_source": "RSS", "work": None}
        # gradients kept from the step above: the backward accumulates into them in place
        model.zero_grad(set_to_none=False)
        base = _reset_peak()
        forward(mode).backward()
        return {"step": whole, "kept": kept, "kept_source": "RSS", "work": _peak_above(base)}
    out = {}
    for mode in modes:
        step(mode)
        out[mode] = (lambda m=mode: step(m), lambda m=mode: memory(m))
    return out


def jax_case(modes, depth, batch):
    import jax
    import jax.numpy as jnp
    ws, bs, x = _inputs(depth, batch)
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in zip(ws, bs)]
    xj = jnp.asarray(x)

    def block(ps, h):
        for w, b in ps:
            h = jnp.tanh(h @ w.T + b)
        return h

    def make_loss(mode):
        per = math.ceil(depth / _segments(depth)) if mode == "sqrt" else depth

        def loss(ps, h):
            for s in range(0, len(ps), per):
                part = ps[s:s + per]
                h = jax.checkpoint(block)(part, h) if mode == "sqrt" else block(part, h)
            return jnp.mean(h * h)
        return loss

    def memory(step, loss):
        base = _reset_peak()
        out = jax.block_until_ready(step(params, xj))
        whole = _peak_above(base)
        del out
        vjp = jax.jit(lambda ps, h: jax.vjp(loss, ps, h)[1])
        res = jax.tree_util.tree_leaves(jax.block_until_ready(vjp(params, xj)))
        kept = sum(r.nbytes for r in res) - sum(w.nbytes + b.nbytes for w, b in params) \
            - x.nbytes
        return {"step": whole, "kept": max(kept, 0), "kept_source": "residuals", "work": None}
    def train(loss):
        def step(ps, h):
            value, grads = jax.value_and_grad(loss)(ps, h)
            return value, jax.tree_util.tree_map(lambda p, g: p - LR * g, ps, grads)
        step = jax.jit(step, donate_argnums=(0,))
        state = {"params": [(w + 0, b + 0) for w, b in params]}

        def run():
            value, state["params"] = jax.block_until_ready(step(state["params"], xj))
            return value

        def measure():
            base = _reset_peak()
            run()
            return {"step": _peak_above(base), "kept": 0, "kept_source": "n/a", "work": None}
        run()
        return run, measure

    out = {}
    for mode in modes:
        loss = make_loss(mode[5:] if mode.startswith("step-") else mode)
        if mode.startswith("step-"):
            out[mode] = train(loss)
            continue
        step = jax.jit(jax.grad(loss))
        jax.block_until_ready(step(params, xj))
        out[mode] = (lambda s=step: jax.block_until_ready(s(params, xj)),
                     lambda s=step, lo=loss: memory(s, lo))
    return out


CASES = {"adjit": adjit_case, "torch": torch_case, "jax": jax_case}


# -- the driver -------------------------------------------------------------------------------
def in_child(task):
    """Run one task in this (fresh) process; -> a JSON-able result."""
    fw, modes, depth, batch, what, repeat, threads = task
    if threads == 1:
        # one core: CPU time is then the time the step needs, whatever else the machine runs
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if fw == "torch":
        import torch
        torch.set_num_threads(threads)
    steps = CASES[fw](modes, depth, batch)
    if what == "memory":
        return steps[modes[0]][1]()
    clock = time.process_time if threads == 1 else time.perf_counter
    times = {m: [] for m in modes}
    for _ in range(repeat):                # interleaved, so drift hits every mode alike
        for m in modes:
            t = clock()
            steps[m][0]()
            times[m].append(clock() - t)
    return {m: min(ts) for m, ts in times.items()}


def child(task, memory=False):
    env = dict(os.environ)
    if memory:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    threads = str(task[-1])
    env.update(OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    if task[-1] == 1:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1").strip()
    cmd = [sys.executable, os.path.abspath(__file__), "--case", json.dumps(task)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{task}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


TRAIN_MODES = {"adjit": ("step-none", "step-sqrt"), "jax": ("step-none", "step-sqrt"),
               "torch": ("step-none", "step-sqrt", "hook-none", "hook-sqrt")}


def measure(fw, depth, batch, repeat, threads, budgets=(), train=False):
    """Memory of each mode in its own fresh process, then all modes timed in one; budgets:
    more memory budgets (bytes) for adjit; train: training steps too (TRAIN_MODES)."""
    rows = []
    for mode in ("none", "sqrt") + (TRAIN_MODES[fw] if train else ()):
        rows.append(dict(framework=fw, mode=mode, depth=depth, batch=batch, **child(
            [fw, [mode], depth, batch, "memory", 1, threads], memory=True)))
    if fw == "adjit":
        # a budget halfway between "sqrt" and store-all, rounded up to a whole MiB
        budget = math.ceil((rows[0]["est_step"] + rows[1]["est_step"]) / 2 / MiB) * MiB
        for b in [budget, *budgets]:
            mode = f"budget={b}"
            rows.append(dict(framework=fw, mode=mode, depth=depth, batch=batch, **child(
                [fw, [mode], depth, batch, "memory", 1, threads], memory=True)))
    times = child([fw, [r["mode"] for r in rows], depth, batch, "time", repeat, threads])
    for r in rows:
        r["time"] = times[r["mode"]]
        print(json.dumps(r), file=sys.stderr, flush=True)
    return rows


def table(results):
    lines = ["| batch | L | framework | schedule | step time (s) | time / store-all | "
             "peak, whole step (MiB) | kept after forward (MiB) | kept / store-all | "
             "peak besides grads (MiB) | besides grads / store-all |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        kind = r["mode"][:5] if r["mode"][:5] in ("step-", "hook-") else ""
        base = next(b for b in results if b["framework"] == r["framework"]
                    and b["depth"] == r["depth"] and b["batch"] == r["batch"]
                    and b["mode"] == kind + "none")
        work = "n/a" if r["work"] is None else f"{r['work'] / MiB:.1f}"
        share = "n/a" if r["work"] is None else f"{r['work'] / base['work']:.0%}"
        if kind:   # a training step's peak is compared with the same step's store-all peak
            share = f"step: {r['step'] / base['step']:.0%}"
        lines.append(
            f"| {r['batch']} | {r['depth']} | {r['framework']} | {_mode(r)} | "
            f"{r['time']:.3f} | {r['time'] / base['time']:.2f}x | {r['step'] / MiB:.1f} | "
            f"{r['kept'] / MiB:.1f} | {r['kept'] / max(base['kept'], 1):.0%} | {work} | "
            f"{share} |")
    return "\n".join(lines)


def _mode(r):
    kind, mode = "", r["mode"]
    if mode[:5] in ("step-", "hook-"):
        kind = {("adjit", "step-"): "SGD step, params donated: ",
                ("jax", "step-"): "SGD step, jit donate_argnums: ",
                ("torch", "step-"): "SGD step, optimizer.step(): ",
                ("torch", "hook-"): "SGD step in backward hooks: "}[r["framework"], mode[:5]]
        mode = mode[5:]
    if mode == "none":
        return kind + "store-all"
    if mode == "sqrt":
        return kind + {"adjit": "checkpoint='sqrt'", "torch": "checkpoint_sequential",
                       "jax": "jax.checkpoint"}[r["framework"]] + f" ({_segments(r['depth'])})"
    return kind + f"memory_budget {int(mode.split('=')[1]) / MiB:.0f} MiB"


def plot(results, path):
    """Left: peak besides parameters and gradients (JAX's jit gives no such split); right:
    step time over store-all's; batch-256 runs against depth."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    sel = [r for r in results if r["batch"] == 256]
    styles = {("adjit", "none"): "C0o--", ("adjit", "sqrt"): "C0o-",
              ("torch", "none"): "C1s--", ("torch", "sqrt"): "C1s-",
              ("jax", "none"): "C2^--", ("jax", "sqrt"): "C2^-"}
    for (fw, mode), style in styles.items():
        rs = sorted((r for r in sel if r["framework"] == fw and r["mode"] == mode),
                    key=lambda r: r["depth"])
        if not rs:
            continue
        label = f"{fw} {'store-all' if mode == 'none' else _mode(rs[0]).split(' (')[0]}"
        if rs[0]["work"] is not None:
            ax1.loglog([r["depth"] for r in rs], [r["work"] / MiB for r in rs], style,
                       label=label)
        base = {r["depth"]: r["time"] for r in sel if r["framework"] == fw
                and r["mode"] == "none"}
        ax2.plot([r["depth"] for r in rs], [r["time"] / base[r["depth"]] for r in rs], style,
                 label=label)
    depths = sorted({r["depth"] for r in sel})
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xticks(depths, [str(d) for d in depths])
        ax.minorticks_off()
        ax.set_xlabel("depth L")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_ylabel("peak besides parameters and gradients (MiB)")
    ax2.set_ylabel("step time / store-all's (CPU time, one core)")
    fig.suptitle(f"deep tanh MLP, width {WIDTH}, batch 256, float32")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--depths", default="16,64,256")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--big-batch", type=int, default=2048, help="batch of the L=64 run where "
                   "activations outweigh gradients (0 to skip)")
    p.add_argument("--big-budget", type=float, default=281, metavar="MIB",
                   help="one more adjit memory budget for the big-batch run (0 to skip); "
                        "281 MiB is about the least any schedule fits in at batch 2048")
    p.add_argument("--train", action="store_true", help="in the big-batch run, also "
                   "measure whole training steps (gradient and SGD update)")
    p.add_argument("--frameworks", default="adjit,torch,jax")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="threads per framework; with 1 "
                   "(the default) each case runs on one core and step time is CPU time, which "
                   "other work on a shared machine does not inflate")
    p.add_argument("--plot", help="PNG path for the batch-256 plot")
    p.add_argument("--json", help="write the raw results here")
    args = p.parse_args()
    if args.case:
        print(json.dumps(in_child(json.loads(args.case))))
        return
    plan = [(args.batch, int(d), (), False) for d in args.depths.split(",") if d]
    if args.big_batch:
        plan.append((args.big_batch, 64,
                     (int(args.big_budget * MiB),) if args.big_budget else (), args.train))
    results = []
    for batch, depth, budgets, train in plan:
        for fw in args.frameworks.split(","):
            results += measure(fw, depth, batch, args.repeat, args.threads, budgets, train)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
