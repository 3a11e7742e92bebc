# Static graphs from Python: placeholders, variables, Session.run with NumPy feeds, minimize,
# the print op, printers, control flow, and the lecture's TF program run as a script.
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
from conftest import have_fashion_mnist

ROOT = os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_linear_regression_with_numpy_feeds():
    g = kiln.Graph()
    x = g.placeholder(kiln.float32, [None, 2], name="x")
    y = g.placeholder(kiln.float32, [None], name="y")
    w = g.variable(kiln.zeros(2), name="w")
    b = g.variable(kiln.zeros(1), name="b")
    assert x.is_symbolic and x.shape == (None, 2)
    pred = kiln.sum(x * w, 1) + b
    loss = kiln.mean((pred - y) * (pred - y))
    step = kiln.optim.SGD(lr=0.1).minimize(loss)
    sess = kiln.Session(g)
    rng = np.random.RandomState(1)
    xs = rng.randn(64, 2).astype(np.float32)
    ys = (xs @ np.array([2.0, -3.0], dtype=np.float32) + 0.5).astype(np.float32)
    for _ in range(200):
        sess.run(step, {x: xs, y: ys})
    l, wv = sess.run([loss, w], {x: xs, y: ys})
    assert l.item() < 1e-6
    np.testing.assert_allclose(wv.numpy(), [2.0, -3.0], atol=1e-3)
    np.testing.assert_allclose(sess.variable("b").numpy(), [0.5], atol=1e-3)
    assert sess.plans_built >= 2
    text = g.to_text()
    assert 'placeholder "x"' in text and "mul" in text
    assert g.to_mermaid().startswith("graph LR") and "digraph" in g.to_dot()
    # A float64 feed for a float32 placeholder is converted; a list works too.
    assert sess.run(pred, {x: [[1.0, 1.0]]}).shape == (1,)


def test_feeds_bad_inputs():
    g = kiln.Graph()
    x = g.placeholder(kiln.float32, [None, 3], name="x")
    i = g.placeholder(kiln.int64, [2], name="i")
    y = x * 2.0
    sess = kiln.Session(g)
    with pytest.raises(kiln.Error):
        sess.run(y, {x: np.zeros((2, 4), dtype=np.float32)})   # wrong shape
    with pytest.raises(kiln.Error):
        sess.run(y)                                             # missing feed
    with pytest.raises(ValueError):
        sess.run(i + 1, {i: np.array([np.nan, 1.0])})           # NaN for an int placeholder
    with pytest.raises(TypeError):
        sess.run(y, {"x": np.zeros((1, 3))})                    # not a placeholder
    out = sess.run(y, {x: np.array([[np.nan, 1.0, 2.0]], dtype=np.float32)})
    assert np.isnan(out.numpy()[0, 0])                          # NaN data flows through
    with pytest.raises(kiln.Error):
        (x * 2.0).item()                                        # host read while building


def test_print_op_runs_on_every_run(capfd):
    g = kiln.Graph()
    x = g.placeholder(kiln.float32, [2], name="x")
    y = kiln.print(x * 2.0, "doubled: ")
    sess = kiln.Session(g)
    for _ in range(3):
        sess.run(y, {x: np.ones(2, dtype=np.float32)})
    out = capfd.readouterr().out
    assert out.count("doubled: ") == 3


def test_cond_and_while_loop_from_python():
    g = kiln.Graph()
    a = g.placeholder(kiln.float32, [], name="a")
    r = kiln.cond(a > 0.0, lambda: a * 10.0, lambda: a - 1.0)
    (n,) = kiln.while_loop(lambda v: v < 100.0, lambda v: (v * 2.0,), [a])
    sess = kiln.Session(g)
    assert sess.run(r, {a: 2.0}).item() == 20.0
    assert sess.run(r, {a: -2.0}).item() == -3.0
    assert sess.run(n, {a: 3.0}).item() == 192.0
    # Eagerly the same functions run one branch.
    assert kiln.cond(kiln.tensor(1.0) > 0.0, lambda: kiln.tensor(1.0), lambda: kiln.tensor(2.0)).item() == 1.0


def test_gradients_symbolic():
    g = kiln.Graph()
    x = g.placeholder(kiln.float64, [3], name="x")
    (dx,) = kiln.gradients([kiln.sum(x * x * x)], [x])
    sess = kiln.Session(g)
    np.testing.assert_allclose(sess.run(dx, {x: np.array([1.0, 2.0, 3.0])}).numpy(), [3.0, 12.0, 27.0])


@pytest.mark.skipif(not have_fashion_mnist(), reason="dataset-fashion-mnist not installed")
def test_lecture_tf_program_from_python():
    script = os.path.join(ROOT, "examples", "python", "tf_softmax_regression.py")
    r = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "test accuracy" in r.stdout and "graph LR" in r.stdout


@pytest.mark.skipif(not have_fashion_mnist(), reason="dataset-fashion-mnist not installed")
def test_pytorch_style_twin_eager_and_jit():
    script = os.path.join(ROOT, "examples", "python", "pytorch_style_softmax_regression.py")
    # A third of an epoch in each mode keeps the suite short (loading the data set is most of
    # it); the full epoch reaches 81.42% both ways.
    r = subprocess.run([sys.executable, script, "--mode", "both", "--steps", "200",
                        "--min-accuracy", "0.7"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[eager] 200 steps" in r.stdout and "[jit] 200 steps" in r.stdout
    assert "1 compiles" in r.stdout
