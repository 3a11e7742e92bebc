"""The module classes of kiln.nn, one file per concept as torch.nn.modules."""
from .module import Module, Parameter, _CppModule  # noqa: F401
from .container import (Container, ModuleDict, ModuleList, ParameterDict,  # noqa: F401
                        ParameterList, Sequential)
from .activation import (CELU, ELU, GELU, GLU, SELU, Hardshrink, Hardsigmoid,  # noqa: F401
                         Hardswish, Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax, Mish, PReLU,
                         ReLU, ReLU6, RReLU, Sigmoid, SiLU, Softmax, Softmax2d, Softmin,
                         Softplus, Softshrink, Softsign, Tanh, Tanhshrink, Threshold)
from .linear import (AlphaDropout, Bilinear, Dropout, Dropout1d, Dropout2d,  # noqa: F401
                     Dropout3d, Embedding, EmbeddingBag, FeatureAlphaDropout, Flatten,
                     Identity, Linear, Unflatten)
from .conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,  # noqa: F401
                   ConvTranspose3d)
from .pooling import *  # noqa: F401,F403
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm,  # noqa: F401
                            InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LayerNorm,
                            SyncBatchNorm)
from .loss import *  # noqa: F401,F403
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: F401
from .transformer import (MoE, MultiheadAttention, Transformer,  # noqa: F401
                          TransformerBlock, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)
from .lazy import *  # noqa: F401,F403
from .adaptive import AdaptiveLogSoftmaxWithLoss  # noqa: F401
