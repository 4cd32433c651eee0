"""One training epoch: adjit's compiled train step against PyTorch eager, same run.

Same MLP (784-256-256-10, relu), same initial weights, same batches in the same order (the
last incomplete batch dropped), same optimizer; both loops read the loss and count correct
predictions every step, as a loop with a progress bar does. Prints the seconds per epoch:
the first epoch (adjit compiles in it) and the median of the others. Never asserts.

    python benchmarks/train_epoch.py [--data DIR] [--epochs 4] [--backends auto,numpy]
"""

import argparse
import os
import platform
import sys
import time

import numpy as np

import adjit
from adjit import tune_malloc
from adjit.frontend.api import pick_backend
from adjit.nn import MLP, Trainer, data, make_optimizer
from adjit.nn.train import normalize

FASHION = "/usr/share/datasets/fashion-mnist"


def load(folder):
    ds = data.load(folder)
    X_all = data.to_float(ds.X_train)
    mean, std = float(X_all.mean()), float(X_all.std())
    return normalize(ds.X_train, mean, std), ds.y_train.astype(np.int64), ds.name


def adjit_epochs(backend, X, y, args):
    model = MLP([784] + args.hidden + [10])
    opt = make_optimizer(args.optimizer, backend=backend)
    trainer = Trainer(model, opt, backend=backend)
    params, state = trainer.init(args.seed)
    _, _, history = trainer.fit(params, state, X, y, epochs=args.epochs,
                                batch_size=args.batch_size, seed=args.seed, progress=False,
                                log=None)
    return history.epoch_time


def torch_epochs(X, y, args):
    import torch
    torch.set_num_threads(args.threads)
    sizes = [784] + args.hidden + [10]
    params = MLP(sizes).init(args.seed)
    layers = []
    for i in range(1, len(sizes)):
        lin = torch.nn.Linear(sizes[i - 1], sizes[i])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(params[f"W{i}"]))
            lin.bias.copy_(torch.from_numpy(params[f"b{i}"]))
        layers += [lin, torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
           "sgd": torch.optim.SGD, "momentum": torch.optim.SGD}[args.optimizer]
    opt_adjit = make_optimizer(args.optimizer, backend="numpy")
    extra = {"momentum": 0.9} if args.optimizer == "momentum" else {}
    opt = cls(model.parameters(), lr=opt_adjit.lr, **extra)
    times = []
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        loss_sum, correct = 0.0, 0
        for xb, yb in data.batches(X, y, args.batch_size, seed=args.seed, epoch=epoch,
                                   drop_last=True):
            xb, yb = torch.from_numpy(xb), torch.from_numpy(yb)
            opt.zero_grad()
            logits = model(xb)
            loss = torch.nn.functional.cross_entropy(logits, yb)
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            correct += int((logits.detach().argmax(1) == yb).sum())
        times.append(time.perf_counter() - t0)
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=FASHION if os.path.isdir(FASHION) else None,
                   help="IDX folder (default: Fashion-MNIST if installed, else the sample)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--hidden", default="256,256")
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--backends", default="auto,numpy")
    p.add_argument("--threads", type=int, default=2, help="PyTorch intra-op threads")
    p.add_argument("--rounds", type=int, default=2, help="alternate the peers this often")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc malloc as it is (adjit mnist tunes it)")
    args = p.parse_args()
    args.hidden = [int(h) for h in args.hidden.split(",")]
    # as `adjit mnist` does; it is process-wide, so PyTorch runs with the same setting
    tuned = not args.default_malloc and tune_malloc()
    malloc = "glibc malloc keeps freed memory" if tuned else "default malloc"
    X, y, name = load(args.data)
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    print(f"# {name}: {len(X):,} examples, batch {args.batch_size}, MLP "
          f"784-{'-'.join(map(str, args.hidden))}-10, {args.optimizer}, {args.epochs} epochs")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}, NumPy {np.__version__}, adjit {adjit.__version__}, "
          f"torch {torch_version or 'not installed'}, {malloc}")
    results = {}
    for _ in range(args.rounds):
        for b in args.backends.split(","):
            label = f"adjit {b} ({pick_backend(b).NAME})"
            results.setdefault(label, []).append(adjit_epochs(b, X, y, args))
        if torch_version:
            results.setdefault(f"PyTorch {torch_version} eager", []).append(
                torch_epochs(X, y, args))
    print("| run | first epoch (s) | later epochs, median (s) | samples/s |")
    print("| --- | --- | --- | --- |")
    steps = len(X) // args.batch_size
    for label, runs in results.items():
        first = float(np.median([r[0] for r in runs]))
        later = float(np.median([t for r in runs for t in r[1:]]))
        rate = steps * args.batch_size / later
        print(f"| {label} | {first:.2f} | {later:.3f} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
