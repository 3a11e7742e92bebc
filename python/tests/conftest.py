# Shared fixtures of the Python suite: a seeded generator per test, and the Debian data set path.
import os

import pytest

import kiln

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


@pytest.fixture(autouse=True)
def seeded():
    kiln.manual_seed(0)
    yield


def have_fashion_mnist():
    return os.path.exists(os.path.join(FASHION_MNIST, "train-images-idx3-ubyte.gz"))
