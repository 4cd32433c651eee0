"""Training loop: one compiled program per step (loss, gradient and optimizer update), a
progress bar, per-epoch validation, and checks that stop on bad data or a non-finite loss.

Input: a model (`apply(params, X)`), a loss, an optimizer and arrays; output: trained
parameters and a `History`. The loop stays backend-agnostic: parameters and optimizer state
go from one program call to the next without conversion (on a GPU they stay on the device);
only the loss and the count of correct predictions are read back, a few at a time.
"""

import math
import time
from dataclasses import dataclass, field

import numpy as np

try:
    from tqdm import tqdm
except ImportError:  # no progress bars without tqdm (nn/data.py has the stand-in)
    from .data import tqdm

from ..frontend.api import compile as adjit_compile
from ..frontend.api import pick_backend, value_and_grad
from ..frontend.trace import trace
from ..ir.errors import AdjitError, ShapeError
from . import data as D
from .losses import binary_cross_entropy_with_logits, mse, softmax_cross_entropy
from .optim import tree_map

__all__ = ["Trainer", "History", "TrainingError", "predict_classes", "normalize",
           "save_params", "load_params"]


class TrainingError(AdjitError):
    """Training cannot go on: the loss became NaN or infinite."""


def predict_classes(logits):
    """The predicted class of each row: argmax over the last axis (the first maximum).

    >>> predict_classes(np.array([[0.1, 2.0, 2.0], [3.0, 0.0, 1.0]]))
    array([1, 0])
    """
    return np.argmax(logits, axis=-1)


def normalize(X, mean, std):
    """uint8 pixels -> float32 (X / 255 - mean) / std; float input is only standardized."""
    X = np.asarray(X)
    X = D.to_float(X) if X.dtype == np.uint8 else X.astype(np.float32)
    return (X - np.float32(mean)) / np.float32(std)


@dataclass
class History:
    """Per-epoch metrics of `Trainer.fit`; accuracies are fractions in [0, 1] (NaN for
    targets without an accuracy, such as those of `mse`)."""
    train_loss: list = field(default_factory=list)
    train_acc: list = field(default_factory=list)
    val_loss: list = field(default_factory=list)
    val_acc: list = field(default_factory=list)
    epoch_time: list = field(default_factory=list)
    samples_per_s: list = field(default_factory=list)
    steps: int = 0




class Trainer:
    """Compiles `train_step(params, state, X, y, lr) -> (loss, correct, params, state)` once.

    The step runs the loss's forward and backward passes and the optimizer's update in one
    program (`adjit.compile` over a function that calls `adjit.value_and_grad`: the
    transformations nest by inlining), so with fusion the update of each parameter is one
    kernel of the same program.

    Device hook: if the backend module defines `to_device(ndarray)` and `to_host(array)`
    (the CuPy backend), data and parameters are moved once with them; the loop never
    converts parameters between steps.

    >>> from adjit.nn import MLP, SGD
    >>> net = MLP([4, 8, 3])
    >>> trainer = Trainer(net, SGD(0.1, backend="numpy"), backend="numpy")
    >>> params, state = trainer.init(seed=0)
    >>> X, y = np.ones((2, 4), np.float32), np.array([0, 2])
    >>> loss, correct, params, state = trainer.step(params, state, X, y)
    >>> loss.shape, int(correct) <= 2
    ((), True)
    """

    def __init__(self, model, optimizer, loss_fn=softmax_cross_entropy, *, backend="auto",
                 fuse=True, checkpoint=None, memory_budget=None, cuda_graph=None):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.backend = backend
        mod = pick_backend(backend)
        options = dict(backend=backend, fuse=fuse, checkpoint=checkpoint,
                       memory_budget=memory_budget)
        if cuda_graph is None:
            cuda_graph = mod.NAME == "cupy"   # shapes are static: fit drops the short batch
        if cuda_graph and mod.NAME == "cupy":
            # one graph launch a step; params and state are updated in their own buffers, so
            # the arrays a step returns are overwritten by the next one (copy to keep them)
            options.update(cuda_graph=True, donate_argnums=(0, 1))
        self.cuda_graph = "cuda_graph" in options
        # the optimizer's hyperparameters besides lr are static: changing one recompiles
        self._train_step = adjit_compile(self._step_fn, static_argnums=5, **options)
        self._train_step.__name__ = "train_step"
        self._eval_step = adjit_compile(self._eval_fn, backend=backend, fuse=fuse)
        self._eval_step.__name__ = "eval_step"
        self.to_device = getattr(mod, "to_device", lambda x: x)
        self.to_host = getattr(mod, "to_host", np.asarray)
        self._widths = {}        # the model's output width per input shape (see classes)

    # -- what the targets are -------------------------------------------------------------
    def target_kind(self, y):
        """How `y` is scored: "classes" (integer labels, (n,): accuracy of the argmax),
        "binary" (float targets of binary_cross_entropy_with_logits: accuracy of the sign of
        each logit) or None (values for mse, class probabilities: no accuracy)."""
        if self.loss_fn is binary_cross_entropy_with_logits:
            return "binary"            # 0/1 targets, also as integers
        if self.loss_fn is mse:
            return None
        if y.dtype.kind in "iu" and len(y.shape) == 1:
            return "classes"
        return None

    def classes(self, params, X, y=None):
        """The number of classes the model predicts: its last layer's width where the model
        says (MLP.sizes), else the width of its output for X (traced once per input shape),
        else the labels' own range."""
        sizes = getattr(self.model, "sizes", None)
        if sizes:
            return sizes[-1]
        if params is not None:
            X = _host(X)
            key = (tuple(X.shape[1:]), str(X.dtype))
            if key not in self._widths:
                g = trace(self.model.apply, params, self._as_model_dtype(X[:1]))
                shape = g[g.outputs[0]]["shape"]
                self._widths[key] = shape[-1] if len(shape) >= 2 else None
            if self._widths[key] is not None:
                return self._widths[key]
        y = np.asarray(_host(y))
        return int(y.max()) + 1 if y.size and y.dtype.kind in "iu" else 1

    def _check_data(self, X, y, name, params=None):
        """DataError unless (X, y) is a set this trainer can use (labels in range, ...)."""
        X, y = _host(X), _host(y)     # CuPy arrays are checked on a host copy
        self._check_label_shape(y, name)
        value_targets = self.target_kind(y) != "classes" and not (
            self.loss_fn is softmax_cross_entropy and y.ndim == 1)   # float labels: say so
        D.check_dataset(X, y, None if value_targets else self.classes(params, X, y),
                        name=name)

    # -- the traced functions -------------------------------------------------------------
    def objective(self, params, X, y):
        """(mean loss, number of correct predictions) on a batch; the count is 0 for targets
        without an accuracy (see `target_kind`)."""
        logits = self.model.apply(params, X)
        return self.loss_fn(logits, y), self._correct(logits, y)

    def _correct(self, logits, y):
        kind = self.target_kind(y)
        if kind == "classes":
            return np.sum(predict_classes(logits) == y)
        if kind == "binary" and tuple(logits.shape) == tuple(y.shape) and len(y.shape):
            match = (logits > 0) == (y > 0.5)
            # per example, so that dividing by the number of examples gives the accuracy
            return np.sum(match) / max(match.size // max(len(y), 1), 1)
        return 0

    def _step_fn(self, params, state, X, y, lr, config=()):
        (loss, correct), grads = value_and_grad(self.objective, has_aux=True)(params, X, y)
        params, state = self.optimizer._configured(params, grads, state, lr, config)
        return loss, correct, params, state

    def _eval_fn(self, params, X, y):
        logits = self.model.apply(params, X)
        loss = self.loss_fn(logits, y)
        # summed over chunks in at least float32: 10,000 float16 losses of 10 overflow
        loss = loss.astype(np.promote_types(loss.dtype, np.float32))
        return loss * len(X), self._correct(logits, y)

    # -- one step, evaluation -------------------------------------------------------------
    def init(self, seed=0):
        params = tree_map(self.to_device, self.model.init(seed))   # any pytree of arrays
        return params, self.optimizer.init(params)

    def step(self, params, state, X, y, lr=None):
        """One compiled training step on a batch; -> (loss, correct, params, state)."""
        X = np.asarray(X) if isinstance(X, (list, tuple)) else X
        y = np.asarray(y) if isinstance(y, (list, tuple)) else y
        if len(X) == 0:
            raise ShapeError("train step: the batch is empty (0 examples)")
        if getattr(self.model, "dtype", None) is not None and X.dtype != self.model.dtype:
            # a float64 batch would promote the float32 parameters to float64 silently
            how = ("scale uint8 pixels as fit and evaluate do: adjit.nn.data.to_float(X)"
                   if X.dtype == np.uint8 else f"convert it with X.astype(np.{self.model.dtype})")
            raise D.DataError(f"train step: the batch has dtype {X.dtype} but the model is "
                              f"{self.model.dtype}; {how}")
        self._check_batch_targets(params, X, y)
        state = self.optimizer.check_state(params, state)
        return self._train_step(params, state, X, y, self.optimizer.hyper(lr),
                                self.optimizer.config())

    def lower(self, params, state, X, y):
        """The Program of the training step for these shapes (source, IR, memory)."""
        return self._train_step.lower(params, state, X, y, self.optimizer.hyper(),
                                      self.optimizer.config())

    def _check_label_shape(self, y, name):
        """Integer labels for softmax_cross_entropy are class indices whatever their shape
        (their dtype is right): a column (n, 1) or one-hot rows are named as such."""
        if self.loss_fn is softmax_cross_entropy and y.dtype.kind in "iub":
            D.check_label_shape(y, name)

    def _check_batch_targets(self, params, X, y):
        if not isinstance(y, np.ndarray):
            return                       # on a device: fit checked the set before moving it
        self._check_label_shape(y, "train step")
        kind = self.target_kind(y)
        if kind == "classes":
            _check_labels(y, self.classes(params, X, y))
        elif self.loss_fn is softmax_cross_entropy and (y.dtype.kind != "f" or y.ndim == 1):
            raise D.DataError(f"labels must be integers, got dtype {y.dtype}")

    def evaluate(self, params, X, y, batch_size=10000):
        """(mean loss, accuracy) over a whole set, in chunks of at most batch_size rows.

        The set is checked and converted as `fit` does (uint8 pixels scaled to [0, 1], the
        model's dtype). The accuracy is NaN for targets without one (see `target_kind`).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size <= 0:
            raise ValueError(f"evaluate: batch_size must be a positive integer, got "
                             f"{batch_size!r}")
        if len(X) == 0:
            raise ShapeError("evaluate: the set is empty (0 examples)")
        if isinstance(X, (np.ndarray, list, tuple)) and isinstance(y, (np.ndarray, list, tuple)):
            X, y = np.asarray(X), np.asarray(y)
            self._check_data(X, y, "evaluation set", params)
            X, y = self._as_model_dtype(X), self._targets_as_model_dtype(y)
        return self._evaluate(params, X, y, batch_size)

    def _evaluate(self, params, X, y, batch_size=10000):
        loss_sum, correct = 0.0, 0.0
        for start in range(0, len(X), batch_size):
            ls, c = self._eval_step(params, X[start:start + batch_size],
                                    y[start:start + batch_size])
            loss_sum, correct = loss_sum + float(ls), correct + float(c)
        accuracy = correct / len(X) if self.target_kind(y) else math.nan
        return loss_sum / len(X), accuracy

    # -- the loop -------------------------------------------------------------------------
    def fit(self, params, state, X, y, *, epochs=1, batch_size=128, validation=None, seed=0,
            lr_schedule=None, progress=True, log=print):
        """Train for `epochs` passes over (X, y); -> (params, state, History).

        X: arrays (n, features), already normalized, converted to the model's dtype here
        (uint8 pixels are first scaled to [0, 1]); y: integer labels. Each epoch
        visits the examples in a new order that depends only on (seed, epoch) and drops the
        last incomplete batch, so every step has the same shape and one program serves them
        all. A batch size larger than the set is an error (`DataError`). `validation` is an
        optional (X, y) pair evaluated after each epoch. `lr_schedule(epoch, step)` may
        return a learning rate per step (no recompilation: it is an argument).
        """
        self._check_data(X, y, "training set", params)
        if validation is not None:
            if not isinstance(validation, (tuple, list)) or len(validation) != 2:
                raise ValueError(f"fit: validation must be an (X, y) pair, got "
                                 f"{type(validation).__name__} {str(validation)[:60]}")
            self._check_data(*validation, "validation set", params)
        if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 1:
            raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
        X, y = self._as_model_dtype(X), self._targets_as_model_dtype(y)
        if validation is not None:
            validation = (self._as_model_dtype(validation[0]),
                          self._targets_as_model_dtype(validation[1]))
        state = self.optimizer.check_state(params, state)
        X, y = self.to_device(X), self.to_device(y)
        if validation is not None:
            validation = tuple(self.to_device(a) for a in validation)
        if progress and log is print:
            log = tqdm.write  # prints above the progress bar instead of through it
        history = History()
        # a diverging run is reported once, by the loss check, not by NumPy warnings from
        # inside the generated code
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for epoch in range(1, epochs + 1):
                params, state, meter = self._epoch(params, state, X, y, epoch, epochs,
                                                   batch_size, seed, lr_schedule, progress)
                scored = self.target_kind(y) is not None
                history.steps += meter.step
                history.train_loss.append(meter.mean_loss)
                history.train_acc.append(meter.accuracy if scored else math.nan)
                history.epoch_time.append(meter.elapsed)
                history.samples_per_s.append(meter.rate)
                line = f"epoch {epoch}/{epochs}: loss {meter.mean_loss:.4f}"
                if scored:
                    line += f", accuracy {100 * meter.accuracy:.2f}%"
                if validation is not None:
                    vl, va = self._evaluate(params, *validation)
                    history.val_loss.append(vl)
                    history.val_acc.append(va)
                    line += f" | validation loss {vl:.4f}"
                    if scored:
                        line += f", accuracy {100 * va:.2f}%"
                line += (f" | {history.epoch_time[-1]:.2f} s, "
                         f"{history.samples_per_s[-1]:,.0f} samples/s")
                if log:
                    log(line)
        return params, state, history

    def _as_model_dtype(self, X):
        on_device = hasattr(X, "__cuda_array_interface__")    # CuPy data stays there
        X = X if on_device else np.asarray(X)
        if X.dtype == np.uint8:   # D.to_float, on the device too
            X = X.reshape(len(X), -1).astype(np.float32) / np.float32(255) if on_device \
                else D.to_float(X)
        dt = getattr(self.model, "dtype", None)
        return X if dt is None or X.dtype == dt else X.astype(dt)

    def _targets_as_model_dtype(self, y):
        # float targets (mse, binary, probabilities) would promote a float32 loss to float64
        y = y if hasattr(y, "__cuda_array_interface__") else np.asarray(y)
        dt = getattr(self.model, "dtype", None)
        return y.astype(dt) if dt is not None and y.dtype.kind == "f" else y

    def _epoch(self, params, state, X, y, epoch, epochs, batch_size, seed, lr_schedule,
               progress):
        """One pass over the data; -> (params, state, the epoch's _Meter)."""
        it = D.batches(X, y, batch_size, seed=seed, epoch=epoch, drop_last=True,
                       order_to=self.to_device)
        n_steps = D.num_batches(len(X), batch_size, drop_last=True)
        bar = tqdm(it, total=n_steps, desc=f"epoch {epoch}/{epochs}", unit="step",
                   disable=not progress, leave=False, dynamic_ncols=True)
        meter = _Meter(epoch, batch_size, scored=self.target_kind(y) is not None)
        config = self.optimizer.config()
        for k, (xb, yb) in enumerate(bar, start=1):
            lr = lr_schedule(epoch, k) if lr_schedule else None
            loss, correct, params, state = self._train_step(
                params, state, xb, yb, self.optimizer.hyper(lr), config)
            meter.add(loss, correct)
            if k % 10 == 0:
                meter.flush()
                bar.set_postfix_str(meter.postfix(), refresh=False)
        meter.flush()
        meter.stop()
        bar.close()
        return params, state, meter


class _Meter:
    """Running loss and accuracy of an epoch; reads device scalars back in groups."""

    def __init__(self, epoch, batch_size, scored=True):
        self.epoch, self.batch_size, self.scored = epoch, batch_size, scored
        self.pending, self.step = [], 0
        self.loss_sum, self.correct, self.seen = 0.0, 0, 0
        self.start, self.end = time.perf_counter(), None

    def add(self, loss, correct):
        self.pending.append((loss, correct))

    def flush(self):
        for loss, correct in self.pending:
            self.step += 1
            value = float(loss)
            if not math.isfinite(value):
                raise TrainingError(
                    f"the loss became {value} at epoch {self.epoch}, step {self.step}; lower "
                    "the learning rate (--lr), or check the data for extreme values")
            self.loss_sum += value
            self.correct += float(correct)
            self.seen += self.batch_size
        self.pending = []

    @property
    def mean_loss(self):
        return self.loss_sum / max(self.step, 1)

    @property
    def accuracy(self):
        return self.correct / max(self.seen, 1)

    def stop(self):
        self.end = time.perf_counter()

    @property
    def elapsed(self):
        return (self.end or time.perf_counter()) - self.start

    @property
    def rate(self):
        return self.seen / max(self.elapsed, 1e-9)

    def postfix(self):
        acc = f"acc={100 * self.accuracy:.1f}%, " if self.scored else ""
        return f"loss={self.mean_loss:.4f}, {acc}{self.rate:,.0f} samples/s"


def _check_labels(y, num_classes):
    if isinstance(y, np.ndarray):
        if y.dtype.kind not in "iu":
            raise D.DataError(f"labels must be integers, got dtype {y.dtype}")
        if y.size and (y.min() < 0 or y.max() >= num_classes):
            bad = y[(y < 0) | (y >= num_classes)][0]
            raise D.DataError(f"label {bad} is outside 0..{num_classes - 1}")


def _host(x):
    # CuPy arrays refuse implicit conversion; .get() copies them to the host
    return x.get() if type(x).__module__.startswith("cupy") else np.asarray(x)


def save_params(path, params, **meta):
    """Write parameters (and scalar metadata such as sizes) to an .npz file."""
    arrays = {f"param/{k}": _host(v) for k, v in params.items()}
    arrays.update({f"meta/{k}": np.asarray(v) for k, v in meta.items()})
    np.savez(path, **arrays)


def load_params(path):
    """-> (params, meta) as written by `save_params`."""
    with np.load(path) as npz:
        params = {k[6:]: npz[k] for k in npz.files if k.startswith("param/")}
        meta = {k[5:]: npz[k] for k in npz.files if k.startswith("meta/")}
    return params, meta
