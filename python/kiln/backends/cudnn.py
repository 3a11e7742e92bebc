"""kiln.backends.cudnn: torch.backends.cudnn's flags; no cuDNN, so they are only recorded."""
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available():
    return False


def version():
    return None
