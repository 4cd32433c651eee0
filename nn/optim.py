"""Optimizers whose update step is a program compiled by adjit: SGD, momentum, Adam, AdamW.

Input: parameters, cotangents of the loss with respect to them (the gradients), and the
optimizer state, all pytrees of arrays; output: new parameters and new state. The update is
a pure function (`apply`), traced and compiled once per signature, so with fusion each
parameter's update is one elementwise kernel. The step count lives in the state and the
learning rate is an argument, so neither recompiles the program when it changes.
"""

import numpy as np

from ..frontend import pytree
from ..frontend.api import compile as adjit_compile
from ..frontend.tracer import Tracer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "make_optimizer", "tree_map"]


def tree_map(fn, tree, *rest):
    """fn applied leaf by leaf to trees of the same structure (the first one's structure)."""
    leaves, treedef, _ = pytree.flatten(tree)
    others = [pytree.flatten(t)[0] for t in rest]
    return pytree.unflatten(treedef, [fn(*xs) for xs in zip(leaves, *others)])


def _same_structure(what, a, b):
    la, ta, pa = pytree.flatten(a, "params")
    lb, tb, _ = pytree.flatten(b, what)
    if ta != tb:
        shown = ", ".join(pa[:4]) + (", ..." if len(pa) > 4 else "")
        raise ValueError(f"optimizer update: {what} must have the structure of params "
                         f"({len(la)} arrays: {shown}), got {len(lb)} arrays in a different "
                         "structure")
    for x, y, p in zip(la, lb, pa):
        if tuple(np.shape(x)) != tuple(np.shape(y)):
            raise ValueError(f"optimizer update: {what} for {p} has shape {tuple(np.shape(y))}"
                             f", the parameter has shape {tuple(np.shape(x))}")


def _as_dtype_of(new, old):
    dt = getattr(old, "dtype", None)
    return new.astype(dt) if dt is not None and dt.kind == "f" and new.dtype != dt else new


def _aligned(ref, tree):
    """tree with its dicts' keys in ref's order (a state saved with sorted keys), so that
    entries pair with parameters by name, not by position."""
    if isinstance(ref, dict) and isinstance(tree, dict) and set(ref) == set(tree):
        return type(tree)((k, _aligned(ref[k], tree[k])) for k in ref)
    if isinstance(ref, (list, tuple)) and isinstance(tree, (list, tuple)) \
            and len(ref) == len(tree):
        out = [_aligned(r, t) for r, t in zip(ref, tree)]
        return type(tree)(*out) if hasattr(tree, "_fields") else type(tree)(out)
    return tree


class Optimizer:
    """Base class: `init(params) -> state`, `update(params, grads, state) -> (params, state)`.

    Subclasses define `slots` (per-parameter state arrays) and `apply`, a pure function of
    (params, grads, state, lr) written with NumPy operations, which `update` compiles.
    """

    slots = ()

    def __init__(self, lr, *, backend="auto", fuse=True):
        if not 0 < lr < np.inf:
            raise ValueError(f"{type(self).__name__}: the learning rate must be positive and "
                             f"finite, got {lr}")
        self.lr = float(lr)
        self.backend = backend
        # the hyperparameters besides lr are compiled into the update, keyed by their values
        # (a static argument): changing opt.weight_decay later compiles the new update
        self._compiled = adjit_compile(self._configured, backend=backend, fuse=fuse,
                                       static_argnums=4)
        self._compiled.__name__ = f"{type(self).__name__.lower()}_update"

    def _configured(self, params, grads, state, lr, config):
        new, new_state = self.apply(params, grads, state, lr)
        # parameters and their slots keep their dtypes, as an in-place update would (an
        # apply computing with the float64 lr or float64 gradients would promote float32)
        new, new_state = tree_map(_as_dtype_of, new, params), dict(new_state)
        for slot in self.slots:
            if slot in new_state and slot in state:
                new_state[slot] = tree_map(_as_dtype_of, new_state[slot], state[slot])
        return new, new_state

    def config(self):
        """The hyperparameters compiled into the update (all but lr), as a hashable key."""
        return tuple((k, v) for k, v in sorted(self._hyperparameters().items()) if k != "lr")

    def init(self, params):
        """The initial state: a step count and zeros like each parameter per slot."""
        state = {"step": np.zeros((), np.float64)}
        for slot in self.slots:
            state[slot] = tree_map(np.zeros_like, params)
        return state

    def update(self, params, grads, state, lr=None):
        """One step of the compiled update; `lr` overrides the learning rate for this step."""
        grads = _aligned(params, grads)
        _same_structure("grads", params, grads)
        return self._compiled(params, grads, self.check_state(params, state), self.hyper(lr),
                              self.config())

    def check_state(self, params, state):
        """state (from `init`) with each slot keyed and shaped like params, its dicts' keys
        in params' order; ValueError for a state of other parameters or another optimizer."""
        if not isinstance(state, dict) or "step" not in state or \
                any(slot not in state for slot in self.slots):
            have = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{type(self).__name__}: the state must be a dict with 'step' and "
                             f"{list(self.slots)} (from {type(self).__name__}.init), got {have}")
        leaves, _, paths = pytree.flatten(params, "params")
        for x, path in zip(leaves, paths):
            dt = np.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)
            if dt.kind != "f":
                raise ValueError(f"{type(self).__name__}: {path} has dtype {dt}; "
                                 f"parameters must be floating point (an integer parameter "
                                 f"would round every step away): params as float32 or float64")
        state = dict(state)
        for slot in self.slots:
            state[slot] = _aligned(params, state[slot])
            _same_structure(f"state[{slot!r}]", params, state[slot])
        return state

    def hyper(self, lr=None):
        """The runtime scalars of the update program."""
        if isinstance(lr, Tracer):
            # opt.update(..., lr=lr) inside a compiled step: a scheduled rate passed in
            return lr.astype(np.float64)
        if lr is not None and not 0 <= float(lr) < np.inf:   # 0 is fine: a warm-up's start
            raise ValueError(f"{type(self).__name__}: the learning rate for this step must be "
                             f">= 0 and finite, got {lr} (from lr= or the lr_schedule)")
        return np.asarray(self.lr if lr is None else float(lr), np.float64)  # a CuPy 0-d too

    def lower(self, params, grads, state):
        """The Program of the update for these shapes (source, IR, memory)."""
        return self._compiled.lower(params, grads, state, self.hyper(), self.config())

    def apply(self, params, grads, state, lr):
        raise NotImplementedError

    def __repr__(self):
        hp = ", ".join(f"{k}={v}" for k, v in self._hyperparameters().items())
        return f"{type(self).__name__}({hp})"

    def _hyperparameters(self):
        return {"lr": self.lr}


class SGD(Optimizer):
    """Stochastic gradient descent, with optional (Nesterov) momentum and L2 weight decay.

    m = momentum * m + g;  p = p - lr * m  (seed 004; PyTorch's SGD with dampening 0).

    >>> import numpy as np
    >>> opt = SGD(0.1, backend="numpy")
    >>> p = {"w": np.array([1.0, 2.0])}
    >>> p, s = opt.update(p, {"w": np.array([1.0, -1.0])}, opt.init(p))
    >>> p["w"], float(s["step"])
    (array([0.9, 2.1]), 1.0)
    """

    def __init__(self, lr, momentum=0.0, *, nesterov=False, weight_decay=0.0, **options):
        if not 0 <= momentum < 1:
            raise ValueError(f"SGD: momentum must be in [0, 1), got {momentum}")
        if nesterov and momentum == 0:
            raise ValueError("SGD: Nesterov momentum needs momentum > 0")
        self.momentum, self.nesterov = float(momentum), bool(nesterov)
        self.weight_decay = float(weight_decay)
        super().__init__(lr, **options)

    @property
    def slots(self):
        return ("momentum",) if self.momentum else ()

    def apply(self, params, grads, state, lr):
        mu, wd = self.momentum, self.weight_decay
        _, p_leaves, g_leaves = _leaves(params, grads)
        m_leaves = pytree.flatten(state["momentum"])[0] if mu else [None] * len(p_leaves)
        out_p, out_m = [], []
        for p, g, m in zip(p_leaves, g_leaves, m_leaves):
            if wd:
                g = g + wd * p
            if mu:
                m = mu * m + g
                g = g + mu * m if self.nesterov else m
            out_p.append(p - lr.astype(p.dtype) * g)
            out_m.append(m)
        new_state = {"step": state["step"] + 1}
        if mu:
            new_state["momentum"] = _rebuild(state["momentum"], out_m)
        return _rebuild(params, out_p), new_state

    def _hyperparameters(self):
        return {"lr": self.lr, "momentum": self.momentum, "nesterov": self.nesterov,
                "weight_decay": self.weight_decay}


class Adam(Optimizer):
    """Adam (Kingma and Ba 2015, Algorithm 1), with optional L2 weight decay as in PyTorch.

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    p = p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

    >>> import numpy as np
    >>> opt = Adam(0.1, backend="numpy")
    >>> p = {"w": np.array([1.0, 2.0])}
    >>> p, s = opt.update(p, {"w": np.array([3.0, -0.5])}, opt.init(p))
    >>> np.round(p["w"], 6)   # the first step moves each weight by about lr
    array([0.9, 2.1])
    """

    slots = ("m", "v")
    decoupled = False

    def __init__(self, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, *, weight_decay=0.0, **options):
        for name, b in (("b1", b1), ("b2", b2)):
            if not 0 <= b < 1:
                raise ValueError(f"{type(self).__name__}: {name} must be in [0, 1), got {b}")
        if not eps >= 0:
            raise ValueError(f"{type(self).__name__}: eps must be >= 0, got {eps}")
        self.b1, self.b2, self.eps = float(b1), float(b2), float(eps)
        self.weight_decay = float(weight_decay)
        super().__init__(lr, **options)

    def init(self, params):
        """The initial state; m and v of a float16 parameter are float32: (1 - b2) g^2 is
        below float16's smallest number for |g| < 8e-3, and v = 0 made the step ~1e6 g."""
        state = super().init(params)
        for slot in self.slots:
            state[slot] = tree_map(lambda z: z.astype(np.float32) if _half(z) else z,
                                   state[slot])
        return state

    def apply(self, params, grads, state, lr):
        b1, b2, eps, wd = self.b1, self.b2, self.eps, self.weight_decay
        t = state["step"] + 1
        # Kingma and Ba, end of section 2: fold both bias corrections into the step size and
        # eps (eps_hat = eps sqrt(1 - b2^t)); the same update as m_hat / (sqrt(v_hat) + eps),
        # with two fewer elementwise operations per parameter. Scalars, in float64.
        sqrt_bc2 = np.sqrt(1 - b2 ** t)
        step_size = lr * sqrt_bc2 / (1 - b1 ** t)
        eps_hat = eps * sqrt_bc2
        _, p_leaves, g_leaves = _leaves(params, grads)
        m_leaves = pytree.flatten(state["m"])[0]
        v_leaves = pytree.flatten(state["v"])[0]
        out_p, out_m, out_v = [], [], []
        for p, g, m, v in zip(p_leaves, g_leaves, m_leaves, v_leaves):
            if wd and self.decoupled:
                p = p * (1 - lr.astype(p.dtype) * wd)   # AdamW: decay the weights themselves
            elif wd:
                g = g + wd * p                          # Adam: L2 term added to the gradient
            if not _half(p):
                m = b1 * m + (1 - b1) * g
                v = b2 * v + (1 - b2) * (g * g)
                denom = np.sqrt(v) + eps_hat.astype(p.dtype)
                out_p.append(p - step_size.astype(p.dtype) * m / denom)
            else:
                # float16: the moments in float32 (init: g^2 underflows in float16), eps
                # (1e-8) and eps_hat underflow to 0 and a zero gradient gave 0 / 0 (PyTorch's
                # too): the step is computed in float32, the textbook form
                f32 = np.float32
                g = g.astype(f32)
                m = b1 * m.astype(f32) + (1 - b1) * g
                v = b2 * v.astype(f32) + (1 - b2) * (g * g)
                denom = np.sqrt(v) * (1 / sqrt_bc2).astype(f32) + f32(eps)
                step = (lr / (1 - b1 ** t)).astype(f32) * m / denom
                out_p.append((p.astype(f32) - step).astype(p.dtype))
            out_m.append(m)
            out_v.append(v)
        new_state = {"step": t, "m": _rebuild(state["m"], out_m),
                     "v": _rebuild(state["v"], out_v)}
        return _rebuild(params, out_p), new_state

    def _hyperparameters(self):
        return {"lr": self.lr, "b1": self.b1, "b2": self.b2, "eps": self.eps,
                "weight_decay": self.weight_decay}


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter 2019), as PyTorch's AdamW:
    p = p (1 - lr wd) before the Adam step, instead of an L2 term in the gradient.

    >>> AdamW(1e-3, weight_decay=0.01, backend="numpy")
    AdamW(lr=0.001, b1=0.9, b2=0.999, eps=1e-08, weight_decay=0.01)
    """

    decoupled = True

    def __init__(self, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, *, weight_decay=0.01, **options):
        super().__init__(lr, b1, b2, eps, weight_decay=weight_decay, **options)


def _half(x) -> bool:
    """A float16 parameter (or slot), whose Adam moments are kept in float32."""
    return np.dtype(x.dtype).itemsize < 4


def _leaves(params, grads):
    p, _, names = pytree.flatten(params, "params")
    return names, p, pytree.flatten(grads)[0]


def _rebuild(like, leaves):
    return pytree.unflatten(pytree.flatten(like)[1], leaves)


# name on the command line -> (class, default learning rate, extra options)
OPTIMIZERS = {
    "sgd": (SGD, 0.1, {}),
    "momentum": (SGD, 0.02, {"momentum": 0.9}),
    "adam": (Adam, 1e-3, {}),
    "adamw": (AdamW, 1e-3, {}),
}


def make_optimizer(name, lr=None, **options):
    """An optimizer by its command-line name, with that name's default learning rate.

    >>> make_optimizer("momentum", backend="numpy")
    SGD(lr=0.02, momentum=0.9, nesterov=False, weight_decay=0.0)
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    cls, default_lr, extra = OPTIMIZERS[name]
    return cls(default_lr if lr is None else lr, **extra, **options)
