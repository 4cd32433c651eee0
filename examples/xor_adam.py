"""The XOR network of seed 004 ("Training Loop"), trained with Adam by adjit.

Points drawn uniformly in [-1, 1]^2 have the target 1 when their coordinates have different
signs. An MLP 2-16-16-1 with the squared loss, mini-batches of 32 and Adam (lr 0.01) for
2,000 steps classifies 99.2% of 256 test points in the text; adjit's gradient and update
are compiled from the same NumPy-style code.

Run: python examples/xor_adam.py
"""
import numpy as np

import adjit
from adjit.nn import MLP, Adam, mse


def xor_data(rng, n):
    x = rng.uniform(-1, 1, (n, 2))
    y = (x[:, 0] * x[:, 1] < 0).astype(float).reshape(n, 1)  # 1 if the signs differ
    return x, y


def main(steps=2000, seed=0, backend="auto", log=print):
    rng = np.random.default_rng(seed)
    N, B = 1024, 32                       # training samples, mini-batch size
    x, y = xor_data(rng, N)
    x_test, y_test = xor_data(rng, 256)
    model = MLP([2, 16, 16, 1], dtype=np.float64)
    params = model.init(seed)

    def loss(params, x, y):
        return mse(model.apply(params, x), y)

    loss_and_grad = adjit.value_and_grad(loss, backend=backend)
    optimizer = Adam(lr=0.01, backend=backend)
    state = optimizer.init(params)
    for step in range(steps):
        n = rng.choice(N, B, replace=False)  # samples of a random mini-batch
        value, grads = loss_and_grad(params, x[n], y[n])
        params, state = optimizer.update(params, grads, state)
        if step % 500 == 0 and log:
            log(f"step {step}: loss {float(value):.4f}")
    accuracy = float(np.mean((model.apply(params, x_test) > 0.5) == y_test))
    if log:
        log(f"test accuracy: {accuracy:.1%}")
    return accuracy


if __name__ == "__main__":
    main()
