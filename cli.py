"""The `adjit` command: train an MLP on MNIST, inspect generated code, study memory.

Input: command-line arguments; output: progress and results on stdout, errors on stderr with
exit status 1 (a problem with the data or the run) or 2 (a usage error, from argparse).
Subcommands live in their own modules; this file only parses arguments and dispatches.
"""

import argparse
import importlib.util
import math
import os
import sys
import textwrap

from . import __version__
from .backends.runtime import tune_malloc

EXAMPLES = """\
examples:
  adjit mnist                                    train on the bundled 5,000-digit sample
  adjit mnist --data ~/mnist --epochs 10         train on the full set (IDX files)
  adjit mnist --download --dataset fashion       fetch Fashion-MNIST, then train
  adjit inspect --mnist                          show the compiled training step
  adjit inspect loss.py:loss --arg w=float32[784,10] --arg x=float32[128,784] \\
      --arg y=int64[128]                         show the IR and code of your own function
  adjit memory --depth 16,32,64 --plot mem.png   checkpointing: memory against depth
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's layout, shows defaults where a default exists."""

    def _get_help_string(self, action):
        h = action.help or ""
        shown = action.default not in (None, [], argparse.SUPPRESS) \
            and not isinstance(action.default, bool)
        if "default" not in h and shown:
            h += " (default: %(default)s)"
        return h


def _widths(text):
    if not text.strip():
        return []                       # no hidden layer: a linear model
    parts = [s.strip() for s in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"an empty width in {text!r}: expected comma-separated "
                                         "widths like 256,256")
    try:
        sizes = [int(s) for s in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated widths like 256,256, "
                                         f"got {text!r}") from None
    if any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"widths must be positive, got {text!r}")
    return sizes


def _int_at_least(least, what):
    """An argparse type: an integer >= least, with a message naming what it must be."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < least:
            raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
        return v
    return parse


_positive_int = _int_at_least(1, "a positive integer")
_seed = _int_at_least(0, "a non-negative integer")


def _positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < v < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text}")
    return v


def _checkpoint(text):
    if text in ("none", "sqrt"):
        return None if text == "none" else text
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected none, sqrt or a number of segments, got "
                                         f"{text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"the number of segments must be >= 1, got {n}")
    return n


BACKENDS = ("auto", "numpy", "numba", "cupy")


def _text(paragraph):
    return textwrap.fill(" ".join(paragraph.split()), 88)


def _add_model_options(parser, title="model and training step"):
    p = parser.add_argument_group(title)
    p.add_argument("--hidden", type=_widths, default=[256, 256], metavar="W1,W2,...",
                   help="hidden layer widths (default: 256,256)")
    p.add_argument("--activation", choices=("relu", "tanh", "sigmoid"), default="relu",
                   help="activation of the hidden layers")
    p.add_argument("--optimizer", choices=("sgd", "momentum", "adam", "adamw"),
                   default="adam", help="optimizer; momentum is SGD with momentum 0.9")
    p.add_argument("--lr", type=_positive_float, metavar="LR",
                   help="peak learning rate (default: 0.001 for adam/adamw, 0.02 for "
                        "momentum, 0.1 for sgd)")
    p.add_argument("--batch-size", type=_positive_int, default=128, metavar="N",
                   help="examples per training step")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="code generator: auto picks cupy with a GPU, else numba, else numpy")
    p.add_argument("--checkpoint", type=_checkpoint, default=None, metavar="none|sqrt|N",
                   help="gradient checkpointing: recompute activations in the backward pass "
                        "(sqrt: about sqrt(L) segments; N: N segments) (default: none)")
    p.add_argument("--fuse", action=argparse.BooleanOptionalAction, default=True,
                   help="fuse elementwise operations into kernels (default: --fuse)")
    p.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
                   help="with the cupy backend, capture the training step once as a CUDA "
                        "graph and replay it (default: on for cupy, off otherwise)")


def build_parser(argv=None):
    parser = argparse.ArgumentParser(
        prog="adjit", formatter_class=_Formatter, epilog=EXAMPLES,
        description=_text("adjit compiles NumPy loss functions into gradient programs. This "
                          "command trains a network with them and shows what was compiled."))
    parser.add_argument("--version", action="version", version=f"adjit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    p = sub.add_parser(
        "mnist", formatter_class=_Formatter, help="train an MLP on MNIST with compiled steps",
        description=_text("Train an MLP on MNIST. Each training step (forward, backward and "
                          "optimizer update) is one program compiled by adjit. Without --data "
                          "or --download it trains offline on the bundled 5,000-digit sample, "
                          "holding out 1,000 digits for the test accuracy."),
        epilog="examples:\n  adjit mnist\n  adjit mnist --data /usr/share/datasets/fashion-mnist"
               " --epochs 10\n  adjit mnist --optimizer momentum --lr 0.05 --plot curves.png")
    src = p.add_argument_group("data")
    where = src.add_mutually_exclusive_group()
    where.add_argument("--data", metavar="DIR",
                       help="folder with the four MNIST (or Fashion-MNIST) IDX files, raw or "
                            ".gz (default: the bundled sample)")
    where.add_argument("--download", action="store_true",
                       help="download the full set (checked by SHA-256) into the cache, "
                            "$ADJIT_CACHE or ~/.cache/adjit")
    src.add_argument("--dataset", choices=("mnist", "fashion"), default="mnist",
                     help="which set --download fetches")
    src.add_argument("--val-size", type=int, default=None, metavar="N",
                     help="training examples held out for per-epoch validation (default: "
                          "10%% of the training set, at most 5,000; 0 turns it off)")
    _add_model_options(p)
    run = p.add_argument_group("run")
    run.add_argument("--epochs", type=_positive_int, default=10, metavar="N",
                     help="passes over the training set")
    run.add_argument("--schedule", choices=("cosine", "constant"), default="cosine",
                     help="learning rate over the run: cosine decays it to 0 by the end")
    run.add_argument("--seed", type=_seed, default=0, help="initialization and shuffling seed")
    run.add_argument("--plot", metavar="FILE.png",
                     help="draw the loss and accuracy curves (needs matplotlib: "
                          "pip install 'adjit[plot]')")
    run.add_argument("--save", metavar="FILE.npz", help="save the trained parameters")
    run.add_argument("--no-progress", dest="progress", action="store_false",
                     help="no progress bar (epoch lines are still printed)")
    p.set_defaults(run="adjit.nn.commands:mnist")

    p = sub.add_parser(
        "inspect", formatter_class=_Formatter,
        help="print the IR and generated code of a function",
        description=_text("Print the IR of a function, and the generated code of its "
                          "gradient: the forward statements, then the backward ones under "
                          "'# backward', each with the source line it comes from."),
        epilog="examples:\n  adjit inspect --mnist --optimizer sgd --batch-size 32\n"
               "  adjit inspect model.py:loss --arg params.W=float32[10,784] \\\n"
               "      --arg X=float32[128,784] --arg y=int64[128]\n"
               "  adjit inspect model.py:predict --arg W=float64[3,3] --arg x=float64[3] "
               "--no-grad")
    p.add_argument("target", nargs="?", metavar="FILE.py:FUNCTION",
                   help="the function to compile (its arguments come from --arg)")
    p.add_argument("--mnist", action="store_true",
                   help="inspect the training step of `adjit mnist` instead")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=SPEC",
                   help="an argument: NAME=float32[128,784] (an array), NAME=0.5 (a number) "
                        "or NAME.KEY=SPEC (an entry of a dict argument); repeat for each")
    p.add_argument("--static", action="append", default=[], metavar="NAME",
                   help="an argument that is configuration, not data (a loop count, a flag): "
                        "a constant of the program, as static_argnums; repeat for each")
    p.add_argument("--wrt", metavar="NAME", action=_Once,
                   help="differentiate with respect to this argument (default: the first)")
    p.add_argument("--no-grad", dest="grad", action="store_false",
                   help="compile the function itself rather than its value and gradient")
    p.add_argument("--show", default="ir,code,memory", metavar="WHAT",
                   help="comma-separated parts to print: ir, code, kernels, memory")
    _add_model_options(p, "model and training step (with --mnist; --backend, "
                          "--checkpoint and --fuse apply to any function)")
    p.set_defaults(run="adjit.nn.commands:inspect")

    p = sub.add_parser(
        "memory", formatter_class=_Formatter,
        help="measure what gradient checkpointing saves as networks get deeper",
        description=_text("Train-step peak memory and time with and without checkpointing, "
                          "for MLPs of growing depth."))
    if _first_command(argv) == "memory" and _has_memory_study():
        from .nn import memory_study
        memory_study.add_arguments(p)
    else:
        p.add_argument("--depth", default="16,32,64,128,256", metavar="D1,D2,...",
                       help="numbers of hidden layers to measure")
        p.add_argument("--width", type=_positive_int, default=1024, help="layer width")
        p.add_argument("--batch", type=_positive_int, default=256, help="batch size")
        p.add_argument("--backend", choices=BACKENDS, default="auto", help="code generator")
        p.add_argument("--plot", metavar="FILE.png", help="plot memory against depth")
    p.set_defaults(run="memory")
    return parser


class _Once(argparse.Action):
    """An option that may be given once (a second --wrt would silently replace the first)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)} and "
                         f"{values}): adjit inspect differentiates with respect to one "
                         "argument (a dict argument's entries are differentiated together)")
        setattr(namespace, self.dest, values)


def _first_command(argv):
    for a in (sys.argv[1:] if argv is None else argv):
        if not a.startswith("-"):
            return a
    return None


def _has_memory_study():
    return importlib.util.find_spec("adjit.nn.memory_study") is not None


def main(argv=None):
    """Entry point of the `adjit` command; returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # `adjit inspect ... | head` closed the pipe: stop quietly, as a Unix tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _main(argv):
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    tune_malloc()
    if args.run == "memory":
        if not _has_memory_study():
            print("adjit memory: this installation has no adjit/nn/memory_study.py (the "
                  "checkpointing study); update adjit, or run `adjit mnist --checkpoint sqrt`"
                  " to train with checkpointing", file=sys.stderr)
            return 1
        from .nn import memory_study
        return memory_study.main(args) or 0
    module, func = args.run.split(":")
    return getattr(importlib.import_module(module), func)(args) or 0


if __name__ == "__main__":
    sys.exit(main())
