"""Loss functions written with adjit's ops, so they trace and differentiate like user code.

Input: a batch of predictions (logits or values) and targets; output: the mean loss, a 0-d
array. Each runs eagerly on NumPy arrays too. Shapes are checked while tracing; label values
cannot be (they are data), so check them first with `adjit.nn.data.check_dataset`.
"""

import numpy as np

from ..frontend.functions import log_softmax, one_hot, softplus
from ..frontend.tracer import Tracer
from ..ir.errors import ShapeError

__all__ = ["softmax_cross_entropy", "mse", "binary_cross_entropy_with_logits"]


def _array(x):
    return x if isinstance(x, Tracer) else np.asarray(x)


def _not_empty(what, x):
    if len(x.shape) and x.shape[0] == 0:
        raise ShapeError(f"{what}: the batch is empty (shape {tuple(x.shape)}); the mean of "
                         "no examples is undefined")


def _check_labels_now(labels, num_classes):
    """Label values are checkable only when they are concrete (an eager call)."""
    if isinstance(labels, np.ndarray) and labels.size:
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= num_classes:
            bad = lo if lo < 0 else hi
            raise ValueError(f"softmax_cross_entropy: label {bad} is outside "
                             f"0..{num_classes - 1}")


def softmax_cross_entropy(logits, labels):
    """Mean over the batch of -log softmax(logits)[label], stable for any logits.

    `labels` are integer classes of shape (n,) or probabilities of the logits' shape.
    An integer label outside 0..C-1 selects no class, so while tracing it would add 0 to
    the loss silently; eager calls raise, and the trainer checks labels before training.

    >>> import numpy as np
    >>> round(float(softmax_cross_entropy(np.array([[0.0, 0.0]]), np.array([1]))), 6)
    0.693147
    """
    logits, labels = _array(logits), _array(labels)
    if len(logits.shape) != 2:
        raise ShapeError(f"softmax_cross_entropy: logits must be (batch, classes), got shape "
                         f"{tuple(logits.shape)}")
    _not_empty("softmax_cross_entropy", logits)
    n, c = logits.shape
    logp = log_softmax(logits, axis=-1)  # log-sum-exp shifted by the max: never overflows
    if labels.dtype.kind in "iu":
        if tuple(labels.shape) != (n,):
            raise ShapeError(f"softmax_cross_entropy: {n} logits rows need {n} integer "
                             f"labels, got labels of shape {tuple(labels.shape)}")
        _check_labels_now(labels, c)
        target = one_hot(labels, c, dtype=logits.dtype)
    elif labels.dtype.kind == "f":
        if tuple(labels.shape) != (n, c):
            raise ShapeError(f"softmax_cross_entropy: probability targets must have the "
                             f"logits' shape {(n, c)}, got {tuple(labels.shape)}")
        target = labels
    else:
        raise ShapeError(f"softmax_cross_entropy: labels must be integers or probabilities, "
                         f"got dtype {labels.dtype}")
    if logits.dtype == np.float16:
        # summed in float32, as NumPy's mean of float16 (10,000 losses of 10 overflow)
        return (-np.sum(logp * target, dtype=np.float32) / n).astype(np.float16)
    return -np.sum(logp * target) / n


def mse(pred, target):
    """Mean squared error over every entry, as in seed 004's MSELoss.

    >>> import numpy as np
    >>> float(mse(np.array([1.0, 2.0]), np.array([1.0, 4.0])))
    2.0
    """
    pred, target = _array(pred), _array(target)
    if tuple(pred.shape) != tuple(target.shape):
        raise ShapeError(f"mse: prediction shape {tuple(pred.shape)} differs from the target "
                         f"shape {tuple(target.shape)}; reshape one (e.g. y.reshape(-1, 1))")
    _not_empty("mse", pred)
    d = pred - target
    return np.mean(d * d)


def binary_cross_entropy_with_logits(logits, targets):
    """Mean of -t log sigmoid(x) - (1 - t) log(1 - sigmoid(x)), stable for any x.

    Written as softplus(x) - t x, where softplus(x) = max(x, 0) + log1p(exp(-|x|)) never
    overflows (the form PyTorch's BCEWithLogitsLoss uses).

    >>> import numpy as np
    >>> round(float(binary_cross_entropy_with_logits(np.array([0.0]), np.array([1.0]))), 6)
    0.693147
    """
    logits, targets = _array(logits), _array(targets)
    if tuple(logits.shape) != tuple(targets.shape):
        raise ShapeError(f"binary_cross_entropy_with_logits: logits shape "
                         f"{tuple(logits.shape)} differs from the targets shape "
                         f"{tuple(targets.shape)}")
    _not_empty("binary_cross_entropy_with_logits", logits)
    return np.mean(softplus(logits) - targets * logits)
