"""RNN, LSTM and GRU (and their cells) with torch.nn's constructor, parameter names
(weight_ih_l0, ..., _reverse), shapes, gate order (LSTM i, f, g, o; GRU r, z, n) and
initialization, so torch state_dicts load and give the same outputs. Per layer and direction:
one input GEMM for all steps, then the steps in one rnn_sequence op (with proj_size or a packed
batch, one small GEMM and the gate math a step). Inputs may be PackedSequences
(kiln.nn.utils.rnn), as torch's."""
import math

from ... import _C
from .. import functional as F
from .. import init
from .module import Module, Parameter, _device_str


def _lstm_step(xg, h, c, w_hh, b_hh, w_hr):
    g = xg + _C.linear(h, w_hh, b_hh)
    i, f, gg, o = _C.chunk(g, 4, -1)
    c = _C.sigmoid(f) * c + _C.sigmoid(i) * _C.tanh(gg)
    h = _C.sigmoid(o) * _C.tanh(c)
    if w_hr is not None:
        h = _C.linear(h, w_hr)
    return h, c


def _gru_step(xg, h, w_hh, b_hh):
    hg = _C.linear(h, w_hh, b_hh)
    xr, xz, xn = _C.chunk(xg, 3, -1)
    hr, hz, hn = _C.chunk(hg, 3, -1)
    r = _C.sigmoid(xr + hr)
    z = _C.sigmoid(xz + hz)
    n = _C.tanh(xn + r * hn)
    return n + z * (h - n)


def _rnn_step(xg, h, w_hh, b_hh, relu):
    pre = xg + _C.linear(h, w_hh, b_hh)
    return _C.relu(pre) if relu else _C.tanh(pre)


_SEQUENCE_MODE = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}


class RNNBase(Module):
    """The stacked, optionally bidirectional recurrence shared by RNN, LSTM and GRU."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0, device=None,
                 dtype=None):
        super().__init__()
        _device_str(device, type(self).__name__)
        dt = dtype or _C.float32
        name = {"LSTM": "LSTM", "GRU": "GRU"}.get(mode, "RNN")
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) \
                or not 0 <= dropout <= 1:
            raise _C.ValueError(f"[{name}] dropout must be a number in [0, 1], got {dropout!r}")
        if hidden_size <= 0 or num_layers <= 0 or input_size < 0:
            raise _C.ValueError(f"[{name}] hidden_size and num_layers must be positive, got "
                                f"{hidden_size}, {num_layers}")
        if proj_size < 0 or (proj_size and mode != "LSTM"):
            raise _C.ValueError(f"[{name}] proj_size must be 0 (only LSTM takes a positive one), "
                                f"got {proj_size}")
        if proj_size >= hidden_size:
            raise _C.ValueError(f"[{name}] proj_size ({proj_size}) must be smaller than "
                                f"hidden_size ({hidden_size})")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        gates = {"LSTM": 4, "GRU": 3}.get(mode, 1)
        dirs = 2 if bidirectional else 1
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            for d in range(dirs):
                in_size = input_size if layer == 0 else real_hidden * dirs
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                shapes = [("weight_ih", (gates * hidden_size, in_size)),
                          ("weight_hh", (gates * hidden_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gates * hidden_size,)),
                               ("bias_hh", (gates * hidden_size,))]
                if proj_size > 0:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for n, s in shapes:
                    self.register_parameter(n + sfx, Parameter(_C.empty(*s, dtype=dt)))
                    self._flat_weights_names.append(n + sfx)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def flatten_parameters(self):
        """torch packs weights for cuDNN here; Kiln's weights need no packing."""

    @property
    def _flat_weights(self):
        return [self._parameters.get(n) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional else 1))
        w = self._flat_weights
        return [w[i:i + per] for i in range(0, len(w), per)]

    def _weights(self, layer, d):
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        p = self._parameters
        return (p["weight_ih" + sfx], p["weight_hh" + sfx], p.get("bias_ih" + sfx),
                p.get("bias_hh" + sfx), p.get("weight_hr" + sfx))

    def _run_direction(self, x, h, c, weights, reverse, lengths):
        """x [T, B, in] -> outputs [T, B, H'] and the final (h, c). With lengths (a packed
        batch, sorted longest first) each sequence stops at its own length: its state is kept
        from then on and its outputs are zeros, as torch's packed outputs pad them."""
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        T = x.shape[0]
        xg = _C.linear(x, w_ih, b_ih)  # one GEMM for all time steps
        if lengths is None and w_hr is None:
            # The steps in one op (its kernel splits each step across the threads).
            y, cs = _C.rnn_sequence(xg, w_hh, b_hh, h, c, _SEQUENCE_MODE[self.mode], reverse)
            last = 0 if reverse else T - 1
            return y, y[last], (cs[last] if cs is not None else None)
        outs = [None] * T
        steps = range(T - 1, -1, -1) if reverse else range(T)
        for t in steps:
            if lengths is not None:
                nb = sum(1 for n in lengths if n > t)  # sequences still running at step t
            else:
                nb = None
            xt = xg[t] if nb is None else xg[t, :nb]
            hp = h if nb is None else h[:nb]
            cp = c if (c is None or nb is None) else c[:nb]
            if self.mode == "LSTM":
                hn, cn = _lstm_step(xt, hp, cp, w_hh, b_hh, w_hr)
            elif self.mode == "GRU":
                hn, cn = _gru_step(xt, hp, w_hh, b_hh), None
            else:
                hn, cn = _rnn_step(xt, hp, w_hh, b_hh, self.mode == "RNN_RELU"), None
            if nb is not None and nb < h.shape[0]:
                outs[t] = _C.cat([hn, _C.zeros(h.shape[0] - nb, hn.shape[1], dtype=hn.dtype)], 0)
                h = _C.cat([hn, h[nb:]], 0)
                if c is not None:
                    c = _C.cat([cn, c[nb:]], 0)
            else:
                outs[t], h, c = hn, hn, cn
        return _C.stack(outs, 0), h, c

    def forward(self, input, hx=None):
        from ..utils.rnn import PackedSequence, pad_packed_sequence, _pack_sorted
        name = type(self).__name__
        packed = isinstance(input, PackedSequence)
        lengths = None
        if packed:
            x, lens = pad_packed_sequence(input, batch_first=False)
            lengths = [int(v) for v in lens.tolist()]
            order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
            if input.sorted_indices is not None:
                x = x.index_select(1, input.sorted_indices)
                lengths = [lengths[i] for i in input.sorted_indices.tolist()]
                if hx is not None:
                    hx = self._permute_hidden(hx, input.sorted_indices)
            elif order != list(range(len(order))):
                raise _C.ValueError(f"[{name}] a PackedSequence without sorted_indices must be "
                                    f"sorted by decreasing length")
            batched = True
        else:
            x = input
            if x.dim() not in (2, 3):
                raise _C.ValueError(f"[{name}] expected a 2-D (unbatched) or 3-D input, got shape "
                                    f"{tuple(x.shape)}")
            batched = x.dim() == 3
            if not batched:
                x = x.unsqueeze(1)
            elif self.batch_first:
                x = x.transpose(0, 1)
        if x.shape[-1] != self.input_size:
            raise _C.ValueError(f"[{name}] input.size(-1) must be equal to input_size. Expected "
                                f"{self.input_size}, got {x.shape[-1]}")
        dirs = 2 if self.bidirectional else 1
        B = x.shape[1]
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        # A time dim known only at run time reads as None (a graph built by hand) or as a
        # symbolic size (jit's dynamic dims): the step loop cannot count it.
        t0 = x.shape[0]
        if t0 is None or (type(t0) is _C.SymInt and t0.is_symbolic):
            return self._dynamic_length_forward(x, hx, batched, name)
        h0, c0 = self._initial_state(hx, batched, B, real_hidden, x.dtype, name, x)
        layer_in = x
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                idx = layer * dirs + d
                c_init = c0[idx] if c0 is not None else None
                out, h, c = self._run_direction(layer_in, h0[idx], c_init,
                                                self._weights(layer, d), d == 1, lengths)
                outs.append(out)
                hs.append(h)
                cs.append(c)
            layer_in = outs[0] if dirs == 1 else _C.cat(outs, 2)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, True)
        h_n = _C.stack(hs, 0)
        c_n = _C.stack(cs, 0) if self.mode == "LSTM" else None
        output = layer_in
        if packed:
            output = _pack_sorted(output, input)
            if input.unsorted_indices is not None:
                h_n = h_n.index_select(1, input.unsorted_indices)
                if c_n is not None:
                    c_n = c_n.index_select(1, input.unsorted_indices)
        elif not batched:
            output = output.squeeze(1)
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if c_n is not None else None
        elif self.batch_first:
            output = output.transpose(0, 1)
        return output, ((h_n, c_n) if self.mode == "LSTM" else h_n)

    def _dynamic_length_forward(self, x, hx, batched, name):
        """Kiln's C++ RNN on this module's parameters: it builds the steps as one while_loop
        when the length is symbolic, where a Python loop cannot count the steps."""
        if self.bidirectional or self.proj_size or (self.dropout and self.training) \
                or not batched:
            raise _C.ValueError(f"[{name}] a time dim of unknown length (a graph or a jit trace "
                                f"with dynamic dims) needs a batched, unidirectional {name} "
                                f"without proj_size or training dropout; got "
                                f"{self.extra_repr()}")
        cpp = self.__dict__.get("_cpp_rnn")
        if cpp is None:
            if self.mode == "LSTM":
                cpp = _C.nn.LSTM(self.input_size, self.hidden_size, self.num_layers, self.bias)
            elif self.mode == "GRU":
                cpp = _C.nn.GRU(self.input_size, self.hidden_size, self.num_layers, self.bias)
            else:
                cpp = _C.nn.RNN(self.input_size, self.hidden_size, self.num_layers,
                                self.nonlinearity, self.bias)
            object.__setattr__(self, "_cpp_rnn", cpp)
        swap = _C.nn.ParameterSwap(cpp, self._flat_weights)
        try:
            out, state = cpp(x, tuple(hx) if isinstance(hx, list) else hx)
        finally:
            swap.close()
        if self.batch_first:
            out = out.transpose(0, 1)
        return out, state

    def _permute_hidden(self, hx, perm):
        if isinstance(hx, tuple):
            return tuple(t.index_select(1, perm) for t in hx)
        return hx.index_select(1, perm)

    def _initial_state(self, hx, batched, B, real_hidden, dtype, name, x=None):
        dirs = 2 if self.bidirectional else 1
        h_shape = (self.num_layers * dirs, B, real_hidden)
        c_shape = (self.num_layers * dirs, B, self.hidden_size)
        if hx is None:
            if x is not None:
                # Zeros made by an op on x ([T, B, I] -> [1, B, 1], expanded): under kiln.jit a
                # fresh factory tensor would be met as new captured state on every trace.
                z = _C.zeros_like(x[:1, :, :1])
                h0 = z.expand(h_shape[0], B, real_hidden).contiguous()
                c0 = (z.expand(c_shape[0], B, self.hidden_size).contiguous()
                      if self.mode == "LSTM" else None)
                return h0, c0
            h0 = _C.zeros(*h_shape, dtype=dtype)
            c0 = _C.zeros(*c_shape, dtype=dtype) if self.mode == "LSTM" else None
            return h0, c0
        if self.mode == "LSTM":
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise _C.TypeError(f"[{name}] hx must be a tuple (h_0, c_0)")
            h0, c0 = hx
        else:
            if not isinstance(hx, _C.Tensor):
                raise _C.TypeError(f"[{name}] hx must be a tensor, got {type(hx).__name__}")
            h0, c0 = hx, None
        if not batched:
            h0 = h0.unsqueeze(1)
            c0 = c0.unsqueeze(1) if c0 is not None else None
        if tuple(h0.shape) != h_shape:
            raise _C.ValueError(f"[{name}] Expected hidden size {h_shape}, got {tuple(h0.shape)}")
        if c0 is not None and tuple(c0.shape) != c_shape:
            raise _C.ValueError(f"[{name}] Expected hidden[1] size {c_shape}, got "
                                f"{tuple(c0.shape)}")
        return h0, c0

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN (tanh or relu); returns (output, h_n)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise _C.ValueError(f"[RNN] Unknown nonlinearity '{nonlinearity}'. Select from "
                                f"'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         device, dtype)
        self.nonlinearity = nonlinearity

    def extra_repr(self):
        s = super().extra_repr()
        return s + (f", nonlinearity={self.nonlinearity}" if self.nonlinearity != "tanh" else "")


class LSTM(RNNBase):
    """LSTM; returns (output, (h_n, c_n))."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype)


class GRU(RNNBase):
    """GRU; returns (output, h_n)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype)


class RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        _device_str(device, type(self).__name__)
        dt = dtype or _C.float32
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.weight_ih = Parameter(_C.empty(num_chunks * hidden_size, input_size, dtype=dt))
        self.weight_hh = Parameter(_C.empty(num_chunks * hidden_size, hidden_size, dtype=dt))
        if bias:
            self.bias_ih = Parameter(_C.empty(num_chunks * hidden_size, dtype=dt))
            self.bias_hh = Parameter(_C.empty(num_chunks * hidden_size, dtype=dt))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def _prepare(self, input, hx, n_states):
        name = type(self).__name__
        if input.dim() not in (1, 2):
            raise _C.ValueError(f"[{name}] Expected input to be 1-D or 2-D, got shape "
                                f"{tuple(input.shape)}")
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        if hx is None:
            z = _C.zeros(x.shape[0], self.hidden_size, dtype=x.dtype)
            states = [z] * n_states
        else:
            states = list(hx) if n_states == 2 else [hx]
            states = [s if batched else s.unsqueeze(0) for s in states]
        return x, states, batched

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise _C.ValueError(f"[RNNCell] Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, hx, 1)
        h = _rnn_step(_C.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh,
                      self.bias_hh, self.nonlinearity == "relu")
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        x, (h, c), batched = self._prepare(input, hx, 2)
        h, c = _lstm_step(_C.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh,
                          self.bias_hh, None)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, hx, 1)
        h = _gru_step(_C.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)
