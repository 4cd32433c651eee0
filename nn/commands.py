"""The `adjit mnist` and `adjit inspect` subcommands, called by cli.py with parsed arguments.

Input: an argparse namespace; output: text on stdout and an exit status. Errors the user can
fix (data, arguments, a diverging run) print one `adjit <command>: error: ...` line on stderr
and return 1; they never surface as tracebacks from generated code.
"""

import functools
import importlib.util
import inspect as pyinspect
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from ..frontend.api import compile as adjit_compile
from ..frontend.api import pick_backend, value_and_grad
from ..ir.errors import AdjitError, GradError, TraceError
from . import data as D
from .layers import MLP
from .optim import make_optimizer
from .train import Trainer, TrainingError, normalize, save_params

__all__ = ["mnist", "inspect", "run_mnist", "prepare_data", "split_validation",
           "cosine_schedule", "parse_spec", "plot_history"]

NUM_CLASSES = 10


def _fail(command, message):
    print(f"adjit {command}: error: {message}", file=sys.stderr)
    return 1


# -- adjit mnist ------------------------------------------------------------------------------
def split_validation(X, y, size, seed=0):
    """Hold out `size` random training examples: -> (X_train, y_train, X_val, y_val)."""
    if size < 0 or size >= len(X):
        raise D.DataError(f"--val-size must be between 0 and {len(X) - 1} (the training set "
                          f"has {len(X)} examples), got {size}")
    order = np.random.default_rng([seed, 1]).permutation(len(X))
    val, train = order[:size], order[size:]
    return X[train], y[train], X[val], y[val]


def cosine_schedule(lr, total_steps, steps_per_epoch):
    """lr(epoch, step) decaying from lr to 0 along half a cosine over the whole run."""
    def schedule(epoch, step):
        s = (epoch - 1) * steps_per_epoch + step - 1
        return lr * 0.5 * (1 + math.cos(math.pi * s / total_steps))
    return schedule


def _check_plot_available():
    if importlib.util.find_spec("matplotlib") is None:
        raise D.DataError("--plot needs matplotlib, which is not installed: "
                          "pip install 'adjit[plot]' (or pip install matplotlib), or leave "
                          "out --plot")


def check_output_path(option, path, plot=False):
    """`path` with ~ expanded (and, for a plot, .png added when it has no suffix); DataError
    unless it can be written (checked before a run, not after it)."""
    target = Path(path).expanduser()
    if plot and not target.suffix:
        target = target.with_suffix(".png")          # what matplotlib would write
    if plot and importlib.util.find_spec("matplotlib") is not None:
        import matplotlib.figure
        kinds = matplotlib.figure.Figure().canvas.get_supported_filetypes()
        if target.suffix[1:].lower() not in kinds:
            raise D.DataError(f"{option} {path}: matplotlib cannot write {target.suffix} "
                              f"files; use one of {', '.join('.' + k for k in sorted(kinds))}")
    folder = target.resolve().parent
    if target.is_dir():
        raise D.DataError(f"{option} {path}: is a folder; give a file name, e.g. "
                          f"{option} {target / 'out'}")
    if not folder.is_dir():
        raise D.DataError(f"{option} {path}: the folder {folder} does not exist; create it "
                          "or give another path")
    if not os.access(folder, os.W_OK):
        raise D.DataError(f"{option} {path}: cannot write into {folder}; give another path")
    return str(target)


def mnist(args):
    """`adjit mnist`: train, validate each epoch, report the test accuracy."""
    try:
        return run_mnist(args)
    except (D.DataError, TrainingError, AdjitError, ValueError) as e:
        return _fail("mnist", str(e))
    except OSError as e:     # e.g. the disk filled up while saving
        return _fail("mnist", f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
    except KeyboardInterrupt:
        print("\nadjit mnist: interrupted", file=sys.stderr)
        return 130


def run_mnist(args, out=print):
    """The body of `adjit mnist`; returns 0, raises DataError/TrainingError on problems."""
    if args.plot:
        _check_plot_available()
        args.plot = check_output_path("--plot", args.plot, plot=True)
    if args.save:
        save = check_output_path("--save", args.save)
        # np.savez adds the suffix when it is missing
        args.save = check_output_path("--save", save if save.endswith(".npz") else
                                      f"{save}.npz")
    name, (X_tr, y_tr), (X_val, y_val), (X_te, y_te), norm = prepare_data(args)
    trainer, sizes = _make_trainer(args, X_tr.shape[1])
    out(f"data: {name}: {len(X_tr):,} training, {len(X_val):,} validation, "
        f"{len(X_te):,} test examples")
    out(f"model: MLP {'-'.join(map(str, sizes))} ({args.activation}, "
        f"{trainer.model.num_params():,} parameters), {trainer.optimizer!r}, batch "
        f"{args.batch_size}, {_plural(args.epochs, 'epoch')}, {args.schedule} learning rate")
    params, state = trainer.init(args.seed)
    t0 = time.perf_counter()
    batch = (X_tr[:args.batch_size], y_tr[:args.batch_size])
    prog = trainer.lower(params, state, *batch)
    # the step is a pure function: one call here builds what backends build lazily (numba
    # kernels) without changing the parameters, so the time below is the whole compile time
    if trainer.cuda_graph:
        # the captured step updates donated buffers in place: warm up on copies
        trainer.step(_copy_tree(params), _copy_tree(state), *batch)
        out("CUDA graph: the step is captured once and replayed (one launch a step); each "
            "epoch drops its last partial batch so every step has the same shapes")
    else:
        trainer.step(params, state, *batch)
    out(f"compiled train_step in {time.perf_counter() - t0:.2f} s: "
        f"{pick_backend(args.backend).NAME} backend, {_summary(prog)}; "
        "`adjit inspect --mnist` prints it")

    steps = len(X_tr) // args.batch_size
    schedule = None
    if args.schedule == "cosine":
        schedule = cosine_schedule(trainer.optimizer.lr, steps * args.epochs, steps)
    t0 = time.perf_counter()
    params, state, history = trainer.fit(
        params, state, X_tr, y_tr, epochs=args.epochs, batch_size=args.batch_size,
        validation=(X_val, y_val) if len(X_val) else None, seed=args.seed,
        lr_schedule=schedule, progress=args.progress, log=out)
    train_time = time.perf_counter() - t0
    test_loss, test_acc = trainer.evaluate(params, X_te, y_te)
    rate = history.steps * args.batch_size / train_time
    out(f"test accuracy {100 * test_acc:.2f}% (loss {test_loss:.4f}) on {len(X_te):,} "
        f"held-out examples; trained in {train_time:.1f} s ({rate:,.0f} samples/s)")
    if args.save:
        save_params(args.save, params, sizes=np.array(sizes), activation=args.activation,
                    mean=norm[0], std=norm[1])
        out(f"saved the parameters to {args.save}")
    if args.plot:
        plot_history(history, args.plot, title=f"{name}: MLP {'-'.join(map(str, sizes))}")
        out(f"saved the curves to {args.plot}")
    return 0


def _copy_tree(tree):
    from ..frontend import pytree
    leaves, treedef, _ = pytree.flatten(tree)
    return pytree.unflatten(treedef, [x.copy() if hasattr(x, "copy") else x for x in leaves])


def prepare_data(args):
    """-> (name, train, validation, test, (mean, std)): float32 images, int64 labels."""
    if args.dataset != "mnist" and not args.download and not args.data:
        # the bundled sample is MNIST digits: training on it would not be what was asked
        raise D.DataError(f"--dataset {args.dataset} selects what --download fetches, and the "
                          "bundled sample is MNIST digits; add --download, or pass the "
                          "folder of its IDX files with --data DIR")
    ds = D.load(args.data, fetch=args.download, dataset=args.dataset,
                progress=args.progress)
    name = f"IDX files in {args.data}" if args.data else ds.name
    D.check_dataset(ds.X_train, ds.y_train, NUM_CLASSES, name=f"{name}: training set")
    D.check_dataset(ds.X_test, ds.y_test, NUM_CLASSES, name=f"{name}: test set")
    val_size = args.val_size if args.val_size is not None \
        else min(5000, len(ds.X_train) // 10)
    X_tr, y_tr, X_val, y_val = split_validation(ds.X_train, ds.y_train, val_size, args.seed)
    if args.batch_size > len(X_tr):
        raise D.DataError(f"--batch-size {args.batch_size} is larger than the {len(X_tr)} "
                          f"training examples; use at most {len(X_tr)}")
    # one mean and one standard deviation over all training pixels, as torchvision's
    # Normalize((0.1307,), (0.3081,)) does for MNIST
    pixels = D.to_float(X_tr)
    mean, std = float(pixels.mean()), float(pixels.std())
    del pixels
    X_tr = normalize(X_tr, mean, std)
    X_val = normalize(X_val, mean, std) if len(X_val) else X_val.astype(np.float32)
    X_te = normalize(ds.X_test, mean, std)
    y_tr, y_val, y_te = (a.astype(np.int64) for a in (y_tr, y_val, ds.y_test))
    return name, (X_tr, y_tr), (X_val, y_val), (X_te, y_te), (mean, std)


def _plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def _make_trainer(args, n_features):
    sizes = [n_features] + list(args.hidden) + [NUM_CLASSES]
    model = MLP(sizes, activation=args.activation)
    opt = make_optimizer(args.optimizer, args.lr, backend=args.backend, fuse=args.fuse)
    trainer = Trainer(model, opt, backend=args.backend, fuse=args.fuse,
                      checkpoint=args.checkpoint, cuda_graph=getattr(args, "cuda_graph", None))
    return trainer, sizes


def _summary(prog):
    statements = sum(1 for line in prog.source.splitlines()
                     if line.startswith("    ") and not line.strip().startswith(("#", "del "))
                     and line.strip())
    kernels = f", {_plural(len(prog.kernels), 'kernel')}" if prog.kernels else ""
    return (f"{len(prog.graph)} IR nodes, {statements} statements{kernels}, "
            f"peak {_bytes(prog.memory.peak_bytes)}")


def _bytes(n):
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def plot_history(history, path, title=""):
    """Loss and accuracy per epoch, training and validation, side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    epochs = range(1, len(history.train_loss) + 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(epochs, history.train_loss, "o-", label="training")
    ax2.plot(epochs, [100 * a for a in history.train_acc], "o-", label="training")
    if history.val_loss:
        ax1.plot(epochs, history.val_loss, "s-", label="validation")
        ax2.plot(epochs, [100 * a for a in history.val_acc], "s-", label="validation")
    ax1.set(xlabel="epoch", ylabel="loss", title="loss")
    ax2.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- adjit inspect ----------------------------------------------------------------------------
_SPEC = re.compile(r"^(?P<dtype>[a-z]+[0-9]*)\[(?P<shape>[0-9,\s]*)\]$")
_PARTS = ("ir", "code", "kernels", "memory")


def inspect(args):
    """`adjit inspect`: print the IR, the generated code and the memory estimate."""
    try:
        show = [s.strip() for s in args.show.split(",") if s.strip()]
        unknown = [s for s in show if s not in _PARTS]
        if unknown:
            raise ValueError(f"--show: unknown part {unknown[0]!r}; choose from "
                             f"{', '.join(_PARTS)}")
        if args.mnist:
            if args.target:
                raise ValueError("give either FILE.py:FUNCTION or --mnist, not both")
            prog, title = _mnist_program(args)
        elif args.target:
            prog, title = _user_program(args)
        else:
            raise ValueError("nothing to inspect: give FILE.py:FUNCTION (with --arg for its "
                             "arguments) or --mnist")
    except (AdjitError, ValueError, D.DataError) as e:
        return _fail("inspect", str(e))
    _print_program(prog, title, show)
    return 0


def _mnist_program(args):
    trainer, sizes = _make_trainer(args, 784)
    params, state = trainer.init(0)
    X = np.zeros((args.batch_size, sizes[0]), np.float32)
    y = np.zeros(args.batch_size, np.int64)
    prog = trainer.lower(params, state, X, y)
    title = (f"train_step of adjit mnist: MLP {'-'.join(map(str, sizes))} "
             f"({args.activation}), {trainer.optimizer!r}, batch {args.batch_size}")
    return prog, title


def _load_function(target):
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"expected FILE.py:FUNCTION, got {target!r}")
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ValueError(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location(f"adjit_inspect_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent))  # so that the file's own imports work
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - the user's file: reported in one line
        raise ValueError(f"{path} could not be imported: {type(e).__name__}: {e}") from None
    finally:
        sys.path.remove(str(file.parent))
    fn = module
    for part in name.split("."):     # FILE.py:Model.loss, FILE.py:model.loss
        fn = getattr(fn, part, None)
    if not callable(fn) or isinstance(fn, type):
        found = [k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                 and not isinstance(v, type) and (getattr(v, "__module__", None) ==
                                                  module.__name__ or hasattr(v, "lower")
                                                  or isinstance(v, functools.partial))]
        raise ValueError(f"{path} has no function {name!r} (functions there: "
                         f"{', '.join(found) or 'none'}; a method is named Class.method)")
    if not hasattr(fn, "__name__"):
        inner = fn
        while isinstance(inner, functools.partial):
            inner = inner.func
        try:
            fn.__name__ = getattr(inner, "__name__", name.split(".")[-1])
        except (AttributeError, TypeError):
            pass
    return fn


def parse_spec(text, seed=0):
    """'float32[128,784]' -> a random array of that type; '0.5' -> 0.5.

    >>> parse_spec("int64[3]")
    array([0, 0, 0])
    >>> parse_spec("float32[2,3]").shape, parse_spec("2.5")
    ((2, 3), 2.5)
    """
    text = text.strip()
    m = _SPEC.match(text)
    if m is None:
        try:
            return int(text) if re.fullmatch(r"[-+]?\d+", text) else float(text)
        except ValueError:
            raise ValueError(f"cannot read the argument spec {text!r}: expected "
                             "DTYPE[SHAPE] such as float32[128,784] or int64[128], or a "
                             "number") from None
    try:
        dtype = np.dtype(m["dtype"])
    except TypeError:
        raise ValueError(f"unknown dtype {m['dtype']!r} in {text!r}") from None
    shape = tuple(int(s) for s in m["shape"].replace(" ", "").split(",") if s)
    if dtype.kind not in "fiub":
        raise ValueError(f"unsupported dtype {dtype} in {text!r}; use a float, int or bool "
                         "type")
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        if dtype.kind == "f":
            return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
        return np.zeros(shape, dtype)  # e.g. labels: any valid value gives the same code
    except MemoryError:
        raise ValueError(f"{text!r} needs {nbytes / 2**30:,.1f} GiB, more memory than is "
                         "free; the code does not depend on the sizes much, so inspect it "
                         "with smaller ones") from None


def _user_args(fn, specs, static=()):
    """The call's arguments from --arg NAME=SPEC, and its keyword-only ones (configuration,
    bound as constants); a --static or keyword-only argument may also be a string
    (--arg activation=relu)."""
    keyword_only = {p.name for p in pyinspect.signature(fn).parameters.values()
                    if p.kind == p.KEYWORD_ONLY}
    values = {}
    for k, item in enumerate(specs):
        name, eq, spec = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"--arg {item!r}: expected NAME=SPEC, e.g. x=float32[128,784]")
        path = name.strip().split(".")
        if any(not part for part in path):
            raise ValueError(f"--arg {item!r}: expected NAME.KEY=SPEC after the dot, e.g. "
                             f"{path[0]}.W=float32[10,784]")
        try:
            value = parse_spec(spec, seed=k)
        except ValueError as e:
            if not spec.strip() or _SPEC.match(spec.strip()):
                raise
            if name.strip() not in static and name.strip() not in keyword_only:
                raise ValueError(f"{e}; a string (an activation's name) is configuration: "
                                 f"add --static {name.strip()}") from None
            value = spec.strip()
        node = values
        for depth, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                head = ".".join(path[:depth + 1])
                raise ValueError(f"--arg {item!r}: {head} was already given as one array; "
                                 f"give either {head}=SPEC or {head}.KEY=SPEC entries")
            node = child
        if path[-1] in node:
            what = "given twice" if not isinstance(node[path[-1]], dict) else \
                f"already given as {name.strip()}.KEY entries"
            raise ValueError(f"--arg {item!r}: {name.strip()} is {what}")
        node[path[-1]] = value
    values = {k: _lists(v) for k, v in values.items()}
    keywords = {k: values.pop(k) for k in list(values) if k in keyword_only}
    params = [p for p in pyinspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params]
    extra = [n for n in values if n not in names]
    if extra:
        shown = names + [f"*, {k}" if i == 0 else k for i, k in enumerate(sorted(keyword_only))]
        raise ValueError(f"{fn.__name__}({', '.join(shown)}) has no argument {extra[0]!r}")
    missing = [p.name for p in params if p.name not in values and p.default is p.empty]
    if missing and missing[0] == "self" and names[0] == "self":
        raise ValueError(f"{fn.__qualname__} is an instance method: its self has no --arg "
                         "form. Inspect a module-level function or a staticmethod that takes "
                         "the arrays (parameters included) as arguments")
    if missing:
        raise ValueError(f"{fn.__name__}({', '.join(names)}) needs --arg for "
                         f"{', '.join(missing)}, e.g. --arg {missing[0]}=float32[128,784] "
                         f"(an array), --arg {missing[0]}=int64[128] (integer labels) or "
                         f"--arg {missing[0]}=0.5 (a number)")
    # up to the last parameter given: a skipped one keeps its default (the call is
    # positional, so b=7 must not land in a)
    last = max((i for i, p in enumerate(params) if p.name in values), default=-1)
    used = params[:last + 1]
    return [values[p.name] if p.name in values else p.default for p in used], \
        [p.name for p in used], keywords


class OptionProblem(ValueError):
    """A command-line option that does not fit the function (not an error the function
    raised while being traced)."""


def _lists(v):
    """Entries keyed 0, 1, ... (--arg ws.0=... --arg ws.1=...) become a list."""
    if not isinstance(v, dict):
        return v
    v = {k: _lists(x) for k, x in v.items()}
    if v and all(k.isdigit() for k in v) and sorted(int(k) for k in v) == list(range(len(v))):
        return [v[str(i)] for i in range(len(v))]
    return v


def _user_program(args):
    fn = _load_function(args.target)
    call_args, names, keywords = _user_args(fn, args.arg, args.static)
    if keywords:        # keyword-only arguments: configuration, bound as constants
        fn = functools.wraps(fn)(functools.partial(fn, **keywords))
    if args.grad and args.wrt is not None and args.wrt not in names:
        try:
            every = list(pyinspect.signature(fn).parameters)
        except (TypeError, ValueError):
            every = names
        if args.wrt in every:
            raise ValueError(f"--wrt {args.wrt}: give it a value with --arg {args.wrt}=... "
                             "(a default is a constant of the program, not differentiated)")
        raise ValueError(f"--wrt {args.wrt}: not an argument of {fn.__name__}"
                         f"({', '.join(every)})")
    _static_positions(args, names)
    try:
        return _lower_user_program(args, fn, call_args, names)
    except (AdjitError, OptionProblem):
        raise                               # adjit's own messages name the line already
    except KeyError as e:
        # the function looked up an entry the --arg options did not build
        key = e.args[0] if e.args else "KEY"
        raise ValueError(f"{fn.__name__} raised KeyError {e}{_user_line(e, fn)} while being "
                         f"traced; is an --arg missing for that entry (e.g. --arg "
                         f"NAME.{key}=float32[...])?") from None
    except IndexError as e:
        raise ValueError(f"{fn.__name__} raised IndexError: {e}{_user_line(e, fn)} while "
                         "being traced; check the shapes given with --arg (a list argument's "
                         "entries are --arg NAME.0=... --arg NAME.1=...)") from None
    except Exception as e:  # noqa: BLE001 - the user's function: reported in one line
        raise ValueError(f"{fn.__name__} raised {type(e).__name__}: {e}{_user_line(e, fn)} "
                         "while being traced") from None


def _user_line(e, fn):
    """' at FILE:LINE (source)' of the innermost frame of e in fn's file, or ''."""
    import linecache
    import traceback
    file = getattr(getattr(fn, "__code__", None), "co_filename", None)
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == file]
    if not frames or f" at {Path(file).name}:" in str(e):
        return ""
    f = frames[-1]
    text = linecache.getline(f.filename, f.lineno).strip()
    return f" at {Path(f.filename).name}:{f.lineno}" + (f" ({text})" if text else "")


def _static_positions(args, names):
    static = []
    for name in args.static:
        if name not in names:
            raise ValueError(f"--static {name}: not an argument given with --arg "
                             f"({', '.join(names)})")
        static.append(names.index(name))
    if args.grad and (names.index(args.wrt) if args.wrt else 0) in static:
        raise ValueError(f"--static {args.wrt or names[0]}: the argument differentiated is "
                         "data (choose another with --wrt NAME)")
    return static


def _lower_user_program(args, fn, call_args, names):
    static = _static_positions(args, names)
    options = dict(backend=args.backend, fuse=args.fuse, checkpoint=args.checkpoint,
                   static_argnums=tuple(static))
    try:
        return _lowered(args, fn, call_args, names, options)
    except TraceError as e:
        numbers = [n for n, v in zip(names, call_args)
                   if isinstance(v, (int, float)) and names.index(n) not in static]
        if not numbers or "static_argnums" not in str(e):
            raise
        raise TraceError(f"{e} (with adjit inspect: --static {numbers[0]})") from None


def _lowered(args, fn, call_args, names, options):
    if args.grad:
        argnum = names.index(args.wrt) if args.wrt else 0
        try:
            prog = value_and_grad(fn, argnum, **options).lower(*call_args)
            return prog, f"value_and_grad of {fn.__name__} with respect to {names[argnum]}"
        except GradError as e:
            if "has_aux=True" in str(e):
                # the function returns (loss, aux), as a has_aux loss does: its gradient
                # program with the aux values carried along
                try:
                    prog = value_and_grad(fn, argnum, has_aux=True, **options).lower(*call_args)
                    return prog, (f"value_and_grad (has_aux: the first result is the loss) of "
                                  f"{fn.__name__} with respect to {names[argnum]}")
                except GradError:
                    pass
            if args.wrt is not None:   # asked for by name: not a silent fallback
                raise OptionProblem(f"--wrt {args.wrt}: {e}") from None
            why = str(e)
            if "has_aux=True" in why:
                # the CLI has no has_aux option: it tried one above, and the first result
                # is not a scalar loss either
                why = (f"{fn.__name__} returns a tuple whose first value is not a scalar "
                       "loss, so it has no gradient (a (loss, aux) pair would be shown with "
                       "its has_aux gradient)")
            print(f"note: no gradient program ({why}); showing {fn.__name__} itself",
                  file=sys.stderr)
    return adjit_compile(fn, **options).lower(*call_args), fn.__name__


def _print_program(prog, title, show):
    rule = "=" * 100
    print(f"{rule}\n{title}\n{prog.backend} backend: {_summary(prog)}\n{rule}")
    if "ir" in show:
        print(f"\n## IR after the passes (one line per node)\n\n{prog.ir}")
    if "code" in show:
        how = " (forward, then backward under '# backward')" if "# backward" in prog.source \
            else ""
        print(f"\n## generated code{how}\n\n{prog.source}")
    if "kernels" in show:
        if prog.kernels:
            for name, src in prog.kernels.items():
                print(f"\n## kernel {name}\n\n{src}")
        else:
            why = (f"the {prog.backend} backend runs fused groups as array expressions in "
                   "the code above") if prog.backend == "numpy" else (
                "every fused group here is small enough to run as the array expressions in "
                "the code above; larger arrays get kernels")
            print(f"\n## kernels\n\nnone: {why}")
    if "memory" in show:
        print(f"\n## memory estimate\n\n{prog.memory}")
