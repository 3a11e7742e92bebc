"""kiln.nn: Module, subclassable in Python as torch.nn.Module is (write forward, assign
parameters and submodules as attributes), and the layers, most of them Kiln's C++ modules
wrapped so that they nest with Python ones.

    class MLP(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = kiln.nn.Linear(784, 256)
            self.fc2 = kiln.nn.Linear(256, 10)
            self.scale = kiln.nn.Parameter(kiln.ones(10))   # a parameter by assignment
        def forward(self, x):
            return self.fc2(kiln.relu(self.fc1(x))) * self.scale
"""
from collections import OrderedDict

from . import _C

Tensor = _C.Tensor


def Parameter(data, requires_grad=True):
    """A leaf tensor that requires grad: assigned to a Module attribute it is a parameter."""
    t = data.detach()
    t.requires_grad_(requires_grad)
    return t


class Module:
    """Base of every module. A tensor that requires grad assigned as an attribute is a parameter,
    a Module a submodule; register_buffer adds non-trainable state saved in state_dict."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- attribute registration ----
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign before Module.__init__() call")
        params, bufs, mods = self._parameters, self._buffers, self._modules
        if isinstance(value, Tensor) and value.requires_grad and value.is_leaf:
            bufs.pop(name, None), mods.pop(name, None), self.__dict__.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            params.pop(name, None), bufs.pop(name, None), self.__dict__.pop(name, None)
            mods[name] = value
        elif name in bufs and (value is None or isinstance(value, Tensor)):
            bufs[name] = value
        elif name in params and value is None:
            params[name] = None
        else:
            params.pop(name, None), bufs.pop(name, None), mods.pop(name, None)
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is not None and not param.requires_grad:
            param.requires_grad_(True)
        self._parameters[name] = param

    def register_buffer(self, name, tensor):
        self._buffers[name] = tensor

    def add_module(self, name, module):
        self._modules[name] = module

    register_module = add_module

    # ---- calling ----
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- traversal (torch's order: a module's own entries, then each child's) ----
    def _local_parameters(self):
        return self._parameters.items()

    def _local_buffers(self):
        return self._buffers.items()

    def named_modules(self, prefix="", memo=None):
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(prefix + ("." if prefix else "") + name, memo)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        return iter((n, m) for n, m in self._modules.items() if m is not None)

    def children(self):
        return iter(m for _, m in self.named_children())

    def named_parameters(self, prefix="", recurse=True):
        """(dotted name, tensor) of every parameter; a tensor held twice is listed once."""
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for n, p in m._local_parameters():
                if p is None or hash(p) in seen:
                    continue
                seen.add(hash(p))
                yield (mp + "." if mp else "") + n, p

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True):
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for n, b in m._local_buffers():
                if b is None or hash(b) in seen:
                    continue
                seen.add(hash(b))
                yield (mp + "." if mp else "") + n, b

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())

    # ---- modes and state ----
    def train(self, mode=True):
        object.__setattr__(self, "training", bool(mode))
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            p.grad = None

    def state_dict(self):
        """OrderedDict of dotted names to tensors: each module's parameters and buffers, then its
        children's (the tensors themselves, not copies, as in torch)."""
        sd = OrderedDict()
        for mp, m in self.named_modules():
            pre = mp + "." if mp else ""
            for n, p in m._local_parameters():
                if p is not None:
                    sd[pre + n] = p
            for n, b in m._local_buffers():
                if b is not None:
                    sd[pre + n] = b
        return sd

    def load_state_dict(self, state_dict, strict=True):
        """Copies values in place by name. Checks every name, shape and dtype first and changes
        nothing when any is wrong (strict: the names must match exactly)."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise _C.Error(f"[load_state_dict] missing keys {missing}, unexpected keys {unexpected}")
        for k, v in state_dict.items():
            if k in own:
                v = v if isinstance(v, Tensor) else _C.tensor(v)
                if tuple(own[k].shape) != tuple(v.shape):
                    raise _C.ValueError(f"[load_state_dict] '{k}': shape {tuple(v.shape)} does not "
                                        f"match {tuple(own[k].shape)}")
        for k, v in state_dict.items():
            if k in own:
                v = v if isinstance(v, Tensor) else _C.tensor(v)
                own[k].detach().copy_(v)
        return missing, unexpected

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for n, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({n}): {sub}")
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


class _CppModule(Module):
    """A Kiln C++ module inside a Python module tree: its parameters are the C++ module's own
    tensors (the same memory, so optimizers and load_state_dict update both sides); buffers
    are read from the C++ module each time, as its forward may give them new tensors."""

    def __init__(self, cpp, extra=""):
        super().__init__()
        object.__setattr__(self, "_cpp", cpp)
        object.__setattr__(self, "_extra", extra)
        for n, p in cpp.named_parameters():
            self._parameters[n] = p

    def _local_buffers(self):
        return self._cpp.named_buffers()

    def __getattr__(self, name):
        if name in ("_cpp", "_extra"):
            raise AttributeError(name)
        try:
            return Module.__getattr__(self, name)
        except AttributeError:
            for n, b in self._cpp.named_buffers():
                if n == name:
                    return b
            raise

    def forward(self, x):
        return self._cpp(x)

    def __call__(self, x):
        return self._cpp(x)

    def train(self, mode=True):
        self._cpp.train(bool(mode))
        return Module.train(self, mode)

    def extra_repr(self):
        return self._extra


def _cpp_class(name, doc):
    cpp_cls = getattr(_C.nn, name)

    def __init__(self, *args, **kwargs):
        extra = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        _CppModule.__init__(self, cpp_cls(*args, **kwargs), extra)

    return type(name, (_CppModule,), {"__init__": __init__, "__doc__": doc})


Linear = _cpp_class("Linear", "y = x @ weight^T + bias; weight [out_features, in_features].")
Conv2d = _cpp_class("Conv2d", "2-D convolution over [N, C, H, W]; weight [out, in/groups, kH, kW].")
Conv1d = _cpp_class("Conv1d", "1-D convolution over [N, C, L].")
ConvTranspose2d = _cpp_class("ConvTranspose2d", "Transposed 2-D convolution; weight [in, out/groups, kH, kW].")
TransformerBlock = _cpp_class("TransformerBlock", "Pre-LayerNorm GPT block (causal by default; MoE MLP "
                              "with moe_experts > 0).")
MoE = _cpp_class("MoE", "Mixture of experts with top-k routing; route(x) gives (y, aux_loss).")


class MultiheadAttention(_CppModule):
    """Multi-head attention; m(x) is self-attention, m(q, k, v, attn_mask=None) attends to k/v."""

    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, bias=True):
        _CppModule.__init__(self, _C.nn.MultiheadAttention(embed_dim, num_heads, causal, dropout, bias),
                            f"{embed_dim}, {num_heads}")

    def __call__(self, query, key=None, value=None, attn_mask=None):
        return self._cpp(query, key, value, attn_mask)

    forward = __call__
MaxPool2d = _cpp_class("MaxPool2d", "Max pooling over [N, C, H, W]; stride defaults to the kernel.")
AvgPool2d = _cpp_class("AvgPool2d", "Average pooling over [N, C, H, W].")
AdaptiveAvgPool2d = _cpp_class("AdaptiveAvgPool2d", "Average pooling to a fixed output size.")
BatchNorm1d = _cpp_class("BatchNorm1d", "Batch normalization over [N, C] or [N, C, L].")
BatchNorm2d = _cpp_class("BatchNorm2d", "Batch normalization over [N, C, H, W].")
LayerNorm = _cpp_class("LayerNorm", "Normalizes over the trailing normalized_shape dims.")
GroupNorm = _cpp_class("GroupNorm", "Group normalization over [N, C, ...].")
Embedding = _cpp_class("Embedding", "Rows of weight [num_embeddings, embedding_dim] by index.")


class _RNN(_CppModule):
    def __call__(self, x, state=None):
        return self._cpp(x, state)

    forward = __call__


def _rnn_class(name, doc):
    cpp_cls = getattr(_C.nn, name)

    def __init__(self, *args, **kwargs):
        _CppModule.__init__(self, cpp_cls(*args, **kwargs), ", ".join(repr(a) for a in args))

    return type(name, (_RNN,), {"__init__": __init__, "__doc__": doc})


RNN = _rnn_class("RNN", "Elman RNN; returns (output, h_n).")
LSTM = _rnn_class("LSTM", "LSTM (PyTorch gate order); returns (output, (h_n, c_n)).")
GRU = _rnn_class("GRU", "GRU; returns (output, h_n).")


class ReLU(Module):
    def forward(self, x):
        return _C.relu(x)


class Tanh(Module):
    def forward(self, x):
        return _C.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return _C.sigmoid(x)


class SiLU(Module):
    def forward(self, x):
        return _C.silu(x)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate == "tanh" or approximate is True

    def forward(self, x):
        return _C.gelu(x, self.approximate)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return _C.leaky_relu(x, self.negative_slope)


class Hardtanh(Module):
    """inplace is accepted and ignored: the result is a new tensor (same values, gradients)."""

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        self.min_val, self.max_val = min_val, max_val

    def forward(self, x):
        return _C.hardtanh(x, self.min_val, self.max_val)


class ReLU6(Hardtanh):
    def __init__(self, inplace=False):
        super().__init__(0.0, 6.0)


class Hardswish(Module):
    def __init__(self, inplace=False):
        super().__init__()

    def forward(self, x):
        return _C.hardswish(x)


class Hardsigmoid(Module):
    def __init__(self, inplace=False):
        super().__init__()

    def forward(self, x):
        return _C.hardsigmoid(x)


class Mish(Module):
    def __init__(self, inplace=False):
        super().__init__()

    def forward(self, x):
        return _C.mish(x)


class SELU(Module):
    def __init__(self, inplace=False):
        super().__init__()

    def forward(self, x):
        return _C.selu(x)


class CELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return _C.celu(x, self.alpha)


class LogSigmoid(Module):
    def forward(self, x):
        return _C.logsigmoid(x)


class GLU(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _C.glu(x, self.dim)


class Softmax(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _C.softmax(x, self.dim)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return _C.dropout(x, self.p, self.training)


class Identity(Module):
    def forward(self, x):
        return x


class Sequential(Module):
    """Modules applied in order."""

    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


class ModuleList(Module):
    def __init__(self, modules=()):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m):
        self.add_module(str(len(self._modules)), m)
        return self

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self):
        return len(self._modules)


def _inplace(input, out, inplace):
    if not inplace:
        return out
    input.copy_(out)
    return input


class functional:
    """torch.nn.functional's names for Kiln's ops."""
    relu = staticmethod(_C.relu)
    gelu = staticmethod(_C.gelu)
    silu = staticmethod(_C.silu)
    sigmoid = staticmethod(_C.sigmoid)
    tanh = staticmethod(_C.tanh)
    leaky_relu = staticmethod(_C.leaky_relu)
    elu = staticmethod(_C.elu)
    softplus = staticmethod(_C.softplus)
    # inplace=True writes the result into the input (torch's in-place form) and returns it.
    @staticmethod
    def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
        return _inplace(input, _C.hardtanh(input, min_val, max_val), inplace)

    @staticmethod
    def relu6(input, inplace=False):
        return _inplace(input, _C.relu6(input), inplace)

    @staticmethod
    def hardswish(input, inplace=False):
        return _inplace(input, _C.hardswish(input), inplace)

    @staticmethod
    def hardsigmoid(input, inplace=False):
        return _inplace(input, _C.hardsigmoid(input), inplace)

    @staticmethod
    def mish(input, inplace=False):
        return _inplace(input, _C.mish(input), inplace)

    @staticmethod
    def selu(input, inplace=False):
        return _inplace(input, _C.selu(input), inplace)

    @staticmethod
    def celu(input, alpha=1.0, inplace=False):
        return _inplace(input, _C.celu(input, alpha), inplace)

    logsigmoid = staticmethod(_C.logsigmoid)
    glu = staticmethod(_C.glu)
    # Compositions of Kiln ops (so autograd, graphs and jit see ordinary ops), as torch's
    # definitions of the same names.
    @staticmethod
    def softsign(input):
        return input / (_C.abs(input) + 1.0)

    @staticmethod
    def tanhshrink(input):
        return input - _C.tanh(input)

    @staticmethod
    def hardshrink(input, lambd=0.5):
        return _C.where(_C.abs(input) > lambd, input, 0.0)

    @staticmethod
    def softshrink(input, lambd=0.5):
        if lambd < 0:
            raise _C.ValueError(f"[softshrink] lambd must be >= 0, got {lambd}")
        return _C.where(input > lambd, input - lambd,
                        _C.where(input < -lambd, input + lambd, 0.0))

    @staticmethod
    def threshold(input, threshold, value, inplace=False):
        return _inplace(input, _C.where(input > threshold, input, float(value)), inplace)

    @staticmethod
    def softmin(input, dim=None, _stacklevel=3, dtype=None):
        if dim is None:
            raise _C.ValueError("[softmin] dim is required (torch's implicit dim is deprecated)")
        x = input if dtype is None else input.to(dtype)
        return _C.softmax(-x, dim)

    @staticmethod
    def prelu(input, weight):
        """max(0, x) + weight * min(0, x); weight has 1 or C (= input.shape[1]) elements."""
        w = weight
        if input.dim() >= 2 and weight.numel() > 1:
            w = weight.reshape([weight.numel()] + [1] * (input.dim() - 2))
        return _C.where(input > 0, input, w * input)

    @staticmethod
    def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
        from . import linalg
        return linalg.vector_norm(x1 - x2 + eps, p, -1, keepdim)

    @staticmethod
    def _channel_dropout(name, rank, input, p, training, inplace):
        if p < 0 or p > 1:
            raise _C.ValueError(f"[{name}] p must be in [0, 1], got {p}")
        if input.dim() not in (rank + 1, rank + 2):
            raise _C.ValueError(f"[{name}] expects a {rank + 1}-D or {rank + 2}-D input, got shape "
                                f"{tuple(input.shape)}")
        if not training or p == 0:
            return input
        # One draw per channel (per sample), zeroing whole feature maps, scaled by 1/(1-p).
        lead = input.dim() - rank
        shape = list(input.shape[:lead]) + [1] * rank
        keep = (_C.rand(*shape, dtype=input.dtype) >= p).to(input.dtype)
        out = input * keep * (0.0 if p == 1 else 1.0 / (1.0 - p))
        return _inplace(input, out, inplace)

    @staticmethod
    def dropout1d(input, p=0.5, training=True, inplace=False):
        return functional._channel_dropout("dropout1d", 1, input, p, training, inplace)

    @staticmethod
    def dropout2d(input, p=0.5, training=True, inplace=False):
        return functional._channel_dropout("dropout2d", 2, input, p, training, inplace)

    @staticmethod
    def dropout3d(input, p=0.5, training=True, inplace=False):
        return functional._channel_dropout("dropout3d", 3, input, p, training, inplace)

    @staticmethod
    def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
        return _C.interpolate(input, size, scale_factor, mode, align_corners)

    @staticmethod
    def upsample_nearest(input, size=None, scale_factor=None):
        return _C.interpolate(input, size, scale_factor, "nearest")

    @staticmethod
    def upsample_bilinear(input, size=None, scale_factor=None):
        return _C.interpolate(input, size, scale_factor, "bilinear", True)

    softmax = staticmethod(_C.softmax)
    log_softmax = staticmethod(_C.log_softmax)

    # torch's trailing-underscore in-place forms.
    @staticmethod
    def relu_(input):
        return _inplace(input, _C.relu(input), True)

    @staticmethod
    def elu_(input, alpha=1.0):
        return _inplace(input, _C.elu(input, alpha), True)

    @staticmethod
    def leaky_relu_(input, negative_slope=0.01):
        return _inplace(input, _C.leaky_relu(input, negative_slope), True)

    @staticmethod
    def hardtanh_(input, min_val=-1.0, max_val=1.0):
        return _inplace(input, _C.hardtanh(input, min_val, max_val), True)

    @staticmethod
    def selu_(input):
        return _inplace(input, _C.selu(input), True)

    @staticmethod
    def celu_(input, alpha=1.0):
        return _inplace(input, _C.celu(input, alpha), True)

    @staticmethod
    def threshold_(input, threshold, value):
        return functional.threshold(input, threshold, value, True)
    linear = staticmethod(_C.linear)
    conv2d = staticmethod(_C.conv2d)
    conv1d = staticmethod(_C.conv1d)
    max_pool2d = staticmethod(_C.max_pool2d)
    avg_pool2d = staticmethod(_C.avg_pool2d)
    adaptive_avg_pool2d = staticmethod(_C.adaptive_avg_pool2d)
    layer_norm = staticmethod(_C.layer_norm)
    batch_norm = staticmethod(_C.batch_norm)
    dropout = staticmethod(_C.dropout)
    embedding = staticmethod(_C.embedding)
    one_hot = staticmethod(_C.one_hot)
    pad = staticmethod(_C.pad)
    interpolate = staticmethod(_C.interpolate)
    normalize = staticmethod(_C.normalize)
    cosine_similarity = staticmethod(_C.cosine_similarity)
    cross_entropy = staticmethod(_C.cross_entropy)
    nll_loss = staticmethod(_C.nll_loss)
    mse_loss = staticmethod(_C.mse_loss)
    binary_cross_entropy_with_logits = staticmethod(_C.binary_cross_entropy_with_logits)
    smooth_l1_loss = staticmethod(_C.smooth_l1_loss)
    huber_loss = staticmethod(_C.huber_loss)
    l1_loss = staticmethod(_C.l1_loss)
    binary_cross_entropy = staticmethod(_C.binary_cross_entropy)
    kl_div = staticmethod(_C.kl_div)
    cosine_embedding_loss = staticmethod(_C.cosine_embedding_loss)
    margin_ranking_loss = staticmethod(_C.margin_ranking_loss)
    hinge_embedding_loss = staticmethod(_C.hinge_embedding_loss)
    soft_margin_loss = staticmethod(_C.soft_margin_loss)
    multilabel_soft_margin_loss = staticmethod(_C.multilabel_soft_margin_loss)
    poisson_nll_loss = staticmethod(_C.poisson_nll_loss)
    gaussian_nll_loss = staticmethod(_C.gaussian_nll_loss)
    triplet_margin_loss = staticmethod(_C.triplet_margin_loss)
    scaled_dot_product_attention = staticmethod(_C.scaled_dot_product_attention)
    # convolution, pooling, resampling, functional norms (kiln/ops/conv.cpp, pool.cpp, norm.cpp)
    conv3d = staticmethod(_C.conv3d)
    conv_transpose1d = staticmethod(_C.conv_transpose1d)
    conv_transpose2d = staticmethod(_C.conv_transpose2d)
    conv_transpose3d = staticmethod(_C.conv_transpose3d)
    max_pool1d = staticmethod(_C.max_pool1d)
    max_pool3d = staticmethod(_C.max_pool3d)
    max_pool1d_with_indices = staticmethod(_C.max_pool1d_with_indices)
    max_pool2d_with_indices = staticmethod(_C.max_pool2d_with_indices)
    max_pool3d_with_indices = staticmethod(_C.max_pool3d_with_indices)
    max_unpool1d = staticmethod(_C.max_unpool1d)
    max_unpool2d = staticmethod(_C.max_unpool2d)
    max_unpool3d = staticmethod(_C.max_unpool3d)
    avg_pool1d = staticmethod(_C.avg_pool1d)
    avg_pool3d = staticmethod(_C.avg_pool3d)
    lp_pool1d = staticmethod(_C.lp_pool1d)
    lp_pool2d = staticmethod(_C.lp_pool2d)
    adaptive_avg_pool1d = staticmethod(_C.adaptive_avg_pool1d)
    adaptive_avg_pool3d = staticmethod(_C.adaptive_avg_pool3d)
    adaptive_max_pool1d = staticmethod(_C.adaptive_max_pool1d)
    adaptive_max_pool2d = staticmethod(_C.adaptive_max_pool2d)
    adaptive_max_pool3d = staticmethod(_C.adaptive_max_pool3d)
    adaptive_max_pool1d_with_indices = staticmethod(_C.adaptive_max_pool1d_with_indices)
    adaptive_max_pool2d_with_indices = staticmethod(_C.adaptive_max_pool2d_with_indices)
    adaptive_max_pool3d_with_indices = staticmethod(_C.adaptive_max_pool3d_with_indices)
    pixel_shuffle = staticmethod(_C.pixel_shuffle)
    pixel_unshuffle = staticmethod(_C.pixel_unshuffle)
    unfold = staticmethod(_C._unfold)
    fold = staticmethod(_C._fold)
    group_norm = staticmethod(_C.group_norm)
    instance_norm = staticmethod(_C.instance_norm)
    local_response_norm = staticmethod(_C.local_response_norm)


# ---- convolution, pooling, resampling and norm modules (torch.nn's names and arguments) ----


def _ntuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class Conv3d(Module):
    """3-D convolution over [N, C, D, H, W]; weight [out, in/groups, kD, kH, kW], initialized as
    torch's (uniform in +-1/sqrt(fan_in))."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros"):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise _C.ValueError("[Conv3d] in_channels and out_channels must be divisible by groups")
        if padding_mode != "zeros":
            raise _C.ValueError(f"[Conv3d] padding_mode '{padding_mode}' is not supported")
        k = _ntuple(kernel_size, 3)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = in_channels // groups * k[0] * k[1] * k[2]
        bound = 1.0 / fan_in ** 0.5
        self.weight = Parameter((_C.rand(out_channels, in_channels // groups, *k) * 2 - 1) * bound)
        self.bias = Parameter((_C.rand(out_channels) * 2 - 1) * bound) if bias else None
        if not bias:
            self.register_parameter("bias", None)

    def forward(self, x):
        return _C.conv3d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                         self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")


class _Fn(Module):
    """A module whose forward is one functional call with the arguments it was built with."""
    _fn = None

    def __init__(self, **kw):
        super().__init__()
        object.__setattr__(self, "_kw", kw)

    def forward(self, x):
        return type(self)._fn(x, **self._kw)

    def extra_repr(self):
        return ", ".join(f"{k}={v!r}" for k, v in self._kw.items())


class MaxPool1d(_Fn):
    _fn = staticmethod(_C.max_pool1d)

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation, ceil_mode=ceil_mode, return_indices=return_indices)


class MaxPool3d(MaxPool1d):
    _fn = staticmethod(_C.max_pool3d)


class AvgPool1d(_Fn):
    _fn = staticmethod(_C.avg_pool1d)

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding,
                         ceil_mode=ceil_mode, count_include_pad=count_include_pad)


class AvgPool3d(_Fn):
    _fn = staticmethod(_C.avg_pool3d)

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding,
                         ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                         divisor_override=divisor_override)


class MaxUnpool1d(_Fn):
    _fn = staticmethod(_C.max_unpool1d)

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x, indices, output_size=None):
        return type(self)._fn(x, indices, output_size=output_size, **self._kw)


class MaxUnpool2d(MaxUnpool1d):
    _fn = staticmethod(_C.max_unpool2d)


class MaxUnpool3d(MaxUnpool1d):
    _fn = staticmethod(_C.max_unpool3d)


class LPPool1d(_Fn):
    _fn = staticmethod(_C.lp_pool1d)

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__(norm_type=norm_type, kernel_size=kernel_size, stride=stride,
                         ceil_mode=ceil_mode)


class LPPool2d(LPPool1d):
    _fn = staticmethod(_C.lp_pool2d)


class AdaptiveAvgPool1d(_Fn):
    _fn = staticmethod(_C.adaptive_avg_pool1d)

    def __init__(self, output_size):
        super().__init__(output_size=output_size)


class AdaptiveAvgPool3d(AdaptiveAvgPool1d):
    _fn = staticmethod(_C.adaptive_avg_pool3d)


class AdaptiveMaxPool1d(_Fn):
    _fn = staticmethod(_C.adaptive_max_pool1d)

    def __init__(self, output_size, return_indices=False):
        super().__init__(output_size=output_size, return_indices=return_indices)


class AdaptiveMaxPool2d(AdaptiveMaxPool1d):
    _fn = staticmethod(_C.adaptive_max_pool2d)


class AdaptiveMaxPool3d(AdaptiveMaxPool1d):
    _fn = staticmethod(_C.adaptive_max_pool3d)


class PixelShuffle(_Fn):
    _fn = staticmethod(_C.pixel_shuffle)

    def __init__(self, upscale_factor):
        super().__init__(upscale_factor=upscale_factor)


class PixelUnshuffle(_Fn):
    _fn = staticmethod(_C.pixel_unshuffle)

    def __init__(self, downscale_factor):
        super().__init__(downscale_factor=downscale_factor)


class Unfold(_Fn):
    _fn = staticmethod(_C._unfold)

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__(kernel_size=kernel_size, dilation=dilation, padding=padding,
                         stride=stride)


class Fold(_Fn):
    _fn = staticmethod(_C._fold)

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__(output_size=output_size, kernel_size=kernel_size, dilation=dilation,
                         padding=padding, stride=stride)


class Upsample(_Fn):
    _fn = staticmethod(_C.interpolate)

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__(size=size, scale_factor=scale_factor, mode=mode,
                         align_corners=align_corners,
                         recompute_scale_factor=recompute_scale_factor)


class LocalResponseNorm(_Fn):
    _fn = staticmethod(_C.local_response_norm)

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__(size=size, alpha=alpha, beta=beta, k=k)


class _Pad(_Fn):
    _fn = staticmethod(_C.pad)
    _mode, _n = "constant", 1

    def __init__(self, padding, value=None):
        pad = _ntuple(padding, 2 * self._n)
        kw = {"pad": list(pad), "mode": self._mode}
        if value is not None:
            kw["value"] = value
        super().__init__(**kw)


def _pad_class(name, mode, n, with_value=False):
    if with_value:
        def __init__(self, padding, value):
            _Pad.__init__(self, padding, value)
    else:
        def __init__(self, padding):
            _Pad.__init__(self, padding)
    return type(name, (_Pad,), {"__init__": __init__, "_mode": mode, "_n": n,
                                "__doc__": f"torch.nn.{name}: F.pad mode '{mode}'."})


ReflectionPad1d = _pad_class("ReflectionPad1d", "reflect", 1)
ReflectionPad2d = _pad_class("ReflectionPad2d", "reflect", 2)
ReflectionPad3d = _pad_class("ReflectionPad3d", "reflect", 3)
ReplicationPad1d = _pad_class("ReplicationPad1d", "replicate", 1)
ReplicationPad2d = _pad_class("ReplicationPad2d", "replicate", 2)
ReplicationPad3d = _pad_class("ReplicationPad3d", "replicate", 3)
CircularPad1d = _pad_class("CircularPad1d", "circular", 1)
CircularPad2d = _pad_class("CircularPad2d", "circular", 2)
CircularPad3d = _pad_class("CircularPad3d", "circular", 3)
ZeroPad2d = _pad_class("ZeroPad2d", "constant", 2)
ConstantPad1d = _pad_class("ConstantPad1d", "constant", 1, True)
ConstantPad2d = _pad_class("ConstantPad2d", "constant", 2, True)
ConstantPad3d = _pad_class("ConstantPad3d", "constant", 3, True)


class _InstanceNorm(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(_C.ones(num_features)) if affine else None
        self.bias = Parameter(_C.zeros(num_features)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros(num_features))
            self.register_buffer("running_var", _C.ones(num_features))
        else:
            self.running_mean = self.running_var = None

    def forward(self, x):
        use_input_stats = self.training or not self.track_running_stats
        return _C.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                use_input_stats, self.momentum, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization over [N, C, L] (each sample's channel normalized by itself)."""


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization over [N, C, H, W]."""


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization over [N, C, D, H, W]."""


def functional_call(module, params, *args, **kwargs):
    """module(*args) run on `params` (in module.parameters() order) instead of its own
    parameters (torch.func.functional_call): what a jitted training step needs, so that the
    parameters are arguments of the compiled function rather than constants baked into it."""
    params = list(params)
    restore, swaps, i = [], [], 0
    try:
        for _, m in module.named_modules():
            if isinstance(m, _CppModule):
                n = len(m._parameters)
                if n:
                    swaps.append(_C.nn.ParameterSwap(m._cpp, params[i:i + n]))
                    i += n
            else:
                for name, p in list(m._parameters.items()):
                    if p is None:
                        continue
                    restore.append((m, name, p))
                    m._parameters[name] = params[i]
                    i += 1
        if i != len(params):
            raise _C.ValueError(f"[functional_call] {len(params)} tensors for {i} parameters")
        return module(*args, **kwargs)
    finally:
        for s in swaps:
            s.close()
        for m, name, p in restore:
            m._parameters[name] = p


# `import kiln.nn.functional as F`, as torch users write it: the import system looks the dotted
# name up in sys.modules before it asks for a package.
__import__("sys").modules[__name__ + ".functional"] = functional
