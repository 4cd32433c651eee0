"""adjit.nn: an MLP, losses, optimizers with compiled updates, MNIST data and a trainer.

>>> from adjit.nn import MLP, Adam, softmax_cross_entropy
>>> MLP([784, 256, 10])
MLP([784, 256, 10], activation='relu')
"""
from .layers import MLP
from .losses import binary_cross_entropy_with_logits, mse, softmax_cross_entropy
from .optim import SGD, Adam, AdamW, Optimizer, make_optimizer
from .train import History, Trainer, TrainingError

__all__ = ["MLP", "SGD", "Adam", "AdamW", "History", "Optimizer", "Trainer", "TrainingError",
           "binary_cross_entropy_with_logits", "make_optimizer", "mse",
           "softmax_cross_entropy"]
