"""kiln.nn.utils: gradient clipping, parameter/vector conversion and (kiln.nn.utils.rnn) packed
sequences, as torch.nn.utils."""
from . import rnn  # noqa: F401
from .clip_grad import clip_grad_norm, clip_grad_norm_, clip_grad_value_  # noqa: F401
from .convert_parameters import parameters_to_vector, vector_to_parameters  # noqa: F401
from .stateless import functional_call  # noqa: F401
from .weight_norm import (remove_spectral_norm, remove_weight_norm,  # noqa: F401,E402
                          spectral_norm, weight_norm)
from .fusion import fuse_conv_bn_eval, fuse_conv_bn_weights  # noqa: F401,E402
from .init import skip_init  # noqa: F401,E402
