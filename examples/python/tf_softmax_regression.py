#!/usr/bin/python3
"""The lecture's TensorFlow-1 program in Kiln from Python: softmax regression on Fashion-MNIST,
defined once as a graph and run by a Session fed NumPy batches (define-then-run).

    x = tf.placeholder(tf.float32, [None, 784]); W = tf.Variable(tf.zeros([784, 10])); ...
    sess.run(train_step, feed_dict={x: batch_xs, y_: batch_ys})

The one departure from the lecture: learning rate 0.1 instead of 0.5 (0.5 was tuned for MNIST
and overshoots on Fashion-MNIST), as examples/static_softmax_regression.cpp does.
Usage: tf_softmax_regression.py [--steps N] [--lr LR] [--dir DIR]; exits 1 below 80% accuracy
after the full epoch (or below --min-accuracy)."""
import argparse
import sys
import time

import numpy as np

import kiln

p = argparse.ArgumentParser()
p.add_argument("--dir", default="/usr/share/datasets/fashion-mnist")
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--steps", type=int, default=600, help="batches of 100 (600: one epoch)")
p.add_argument("--min-accuracy", type=float, default=0.80)
args = p.parse_args()

# The data as NumPy arrays, as the lecture's input_data.read_data_sets gives them.
train_x, train_y, test_x, test_y = (np.asarray(t) for t in kiln.io.load_fashion_mnist(args.dir))

g = kiln.Graph()
x = g.placeholder(kiln.float32, [None, 784], name="x")      # tf.placeholder
y_ = g.placeholder(kiln.int64, [None], name="y_")
W = g.variable(kiln.zeros(784, 10), name="W")               # tf.Variable(tf.zeros(...))
b = g.variable(kiln.zeros(10), name="b")
logits = kiln.matmul(x, W) + b
y = kiln.softmax(logits, -1)                                # tf.nn.softmax
print("The model as a dataflow graph (Mermaid):")
print(g.to_mermaid())
cross_entropy = kiln.cross_entropy(logits, y_)
train_step = kiln.optim.SGD(lr=args.lr).minimize(cross_entropy)  # GradientDescentOptimizer
correct = kiln.eq(kiln.argmax(y, 1), y_)
accuracy = kiln.mean(kiln.cast(correct, kiln.float32))

sess = kiln.Session(g)
t0 = time.perf_counter()
for i in range(args.steps):
    s = (i * 100) % len(train_x)
    batch_xs, batch_ys = train_x[s:s + 100], train_y[s:s + 100]   # NumPy batches
    sess.run(train_step, feed_dict={x: batch_xs, y_: batch_ys})
    if i % 100 == 0:
        l = sess.run(cross_entropy, feed_dict={x: batch_xs, y_: batch_ys})
        print(f"step {i:4d}  loss {l.item():.4f}")
secs = time.perf_counter() - t0
acc = sess.run(accuracy, feed_dict={x: test_x, y_: test_y}).item()
print(f"{args.steps} steps in {secs:.2f} s; test accuracy {100 * acc:.2f}%")
sys.exit(0 if acc >= args.min_accuracy else 1)
