"""kiln.backends.mkldnn: Kiln's CPU kernels use oneDNN where it helps."""
enabled = True


def is_available():
    return True
