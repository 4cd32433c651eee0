"""An MLP on MNIST in twenty lines: adjit compiles the loss's gradient and the Adam update.

Run: python examples/mnist_mlp.py [IDX_DIR]   (without a folder: the bundled 5,000 digits)
"""
import sys

import numpy as np

import adjit
from adjit.nn import MLP, Adam, data, softmax_cross_entropy


def main(folder=None, epochs=5, batch_size=64, backend="auto"):
    ds = data.load(folder)                                     # uint8 images, uint8 labels
    X, X_test = data.to_float(ds.X_train), data.to_float(ds.X_test)
    y, y_test = ds.y_train.astype(np.int64), ds.y_test.astype(np.int64)
    model = MLP([784, 256, 10])
    params = model.init(seed=0)

    def loss(params, X, y):                                    # plain NumPy-style code
        return softmax_cross_entropy(model.apply(params, X), y)

    loss_and_grad = adjit.value_and_grad(loss, backend=backend)  # compiled on first call
    predict = adjit.compile(model.apply, backend=backend)
    opt = Adam(lr=1e-3, backend=backend)
    state = opt.init(params)
    for epoch in range(epochs):
        for Xb, yb in data.batches(X, y, batch_size, seed=0, epoch=epoch, drop_last=True):
            value, grads = loss_and_grad(params, Xb, yb)
            params, state = opt.update(params, grads, state)  # one compiled update
        accuracy = np.mean(np.argmax(predict(params, X_test), axis=1) == y_test)
        print(f"epoch {epoch + 1}: loss {float(value):.4f}, test accuracy {accuracy:.2%}")
    return accuracy


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
