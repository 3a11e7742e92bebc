#!/usr/bin/python3
"""The PyTorch-style twin of tf_softmax_regression.py: the same softmax regression on
Fashion-MNIST written define-by-run, with a Python kiln.nn.Module, a DataLoader and an eager
optimizer step; or the same training step under @kiln.jit (--mode jit), or both in turn from the
same initial weights (--mode both).
Usage: pytorch_style_softmax_regression.py [--steps N] [--lr LR] [--mode eager|jit|both]"""
import argparse
import sys
import time

import kiln
import kiln.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--dir", default="/usr/share/datasets/fashion-mnist")
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--steps", type=int, default=600)
p.add_argument("--mode", choices=["eager", "jit", "both"], default="eager")
p.add_argument("--min-accuracy", type=float, default=0.80)
args = p.parse_args()


class SoftmaxRegression(nn.Module):
    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(kiln.zeros(784, 10))
        self.b = nn.Parameter(kiln.zeros(10))

    def forward(self, x):
        return x @ self.W + self.b


train_x, train_y, test_x, test_y = kiln.io.load_fashion_mnist(args.dir)


def train(mode):
    """Trains a fresh model for args.steps steps; returns its test accuracy."""
    model = SoftmaxRegression()
    opt = kiln.optim.SGD(model.parameters(), lr=args.lr)
    loader = kiln.io.DataLoader((train_x, train_y), batch_size=100)

    def step(x, y):
        loss = kiln.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    # Under jit the step is a function of (params, batch) -> (new params, loss): the parameters
    # are arguments (not constants baked into the trace) and donated, so updates reuse their
    # memory.
    @kiln.jit(donate=[0])
    def jit_step(params, x, y):
        ps = [p.detach().requires_grad_() for p in params]
        loss = kiln.cross_entropy(nn.functional_call(model, ps, x), y)
        grads = kiln.grad(loss, ps)
        return [p - args.lr * g for p, g in zip(params, grads)] + [loss.detach()]

    params = [p.detach() for p in model.parameters()]
    t0 = time.perf_counter()
    i = 0
    while i < args.steps:
        for x, y in loader:
            if i >= args.steps:
                break
            if mode == "jit":
                *params, loss = jit_step(params, x, y)
            else:
                loss = step(x, y)
            if i % 100 == 0:
                print(f"[{mode}] step {i:4d}  loss {loss.item():.4f}")
            i += 1
    secs = time.perf_counter() - t0
    if mode == "jit":
        model.load_state_dict({"W": params[0], "b": params[1]})
    with kiln.no_grad():
        pred = kiln.argmax(model(test_x), 1)
        acc = kiln.mean(kiln.cast(kiln.eq(pred, test_y), kiln.float32)).item()
    print(f"[{mode}] {args.steps} steps in {secs:.2f} s; test accuracy {100 * acc:.2f}%")
    if mode == "jit":
        print(jit_step.explain())
    return acc


accs = [train(m) for m in (["eager", "jit"] if args.mode == "both" else [args.mode])]
sys.exit(0 if min(accs) >= args.min_accuracy else 1)
