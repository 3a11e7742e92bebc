"""MultiheadAttention and the Transformer encoder/decoder layers and stacks with torch.nn's
arguments, parameter names (in_proj_weight, out_proj.weight, linear1, norm1, ...), masks
(attn_mask bool True = masked out or additive float; key_padding_mask True = ignore) and
initialization; Kiln's own TransformerBlock and MoE (C++ modules) are here too."""
import copy

from ... import _C
from .. import functional as F
from .. import init
from .container import ModuleList
from .linear import Dropout, Linear
from .module import Module, Parameter, _CppModule, _device_str
from .normalization import LayerNorm


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: forward(query, key, value, key_padding_mask=None,
    need_weights=True, attn_mask=None, average_attn_weights=True) -> (output, weights or None);
    [L, N, E] inputs ([N, L, E] with batch_first, or unbatched [L, E])."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        _device_str(device, type(self).__name__)
        dt = dtype or _C.float32
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise _C.ValueError(f"[MultiheadAttention] embed_dim ({embed_dim}) must be divisible "
                                f"by num_heads ({num_heads}), both positive")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.batch_first, self.head_dim = batch_first, embed_dim // num_heads
        self.add_zero_attn = add_zero_attn
        E = embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(_C.empty(3 * E, E, dtype=dt))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(_C.empty(E, E, dtype=dt))
            self.k_proj_weight = Parameter(_C.empty(E, self.kdim, dtype=dt))
            self.v_proj_weight = Parameter(_C.empty(E, self.vdim, dtype=dt))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(_C.empty(3 * E, dtype=dt))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(E, E, bias=bias, dtype=dt)
        if add_bias_kv:
            self.bias_k = Parameter(_C.empty(1, 1, E, dtype=dt))
            self.bias_v = Parameter(_C.empty(1, 1, E, dtype=dt))
        else:
            self.bias_k = self.bias_v = None
        self._reset_parameters()

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True):
        batched = query.dim() == 3
        if batched and self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        out, weights = F.multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
            self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
            self.out_proj.weight, self.out_proj.bias, training=self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
            use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight, average_attn_weights=average_attn_weights)
        if batched and self.batch_first:
            out = out.transpose(0, 1)
        return out, weights


def _get_activation(activation):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if callable(activation):
        return activation
    raise _C.ValueError(f"[Transformer] activation should be relu/gelu or a callable, not "
                        f"{activation!r}")


class _TransformerLayer(Module):
    """What the encoder and decoder layers share: self-attention (the decoder's second
    attention reads the encoder's memory), the feed-forward block, one LayerNorm and dropout
    per block, registered in torch's order so that state_dict keys and parameters() match."""
    _blocks = 2

    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                 batch_first, norm_first, device, dtype):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, **kw)
        if self._blocks == 3:
            self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                                     batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, **kw)
        self.norm_first = norm_first
        for i in range(1, self._blocks + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, **kw))
        for i in range(1, self._blocks + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _get_activation(activation)

    def _residual(self, x, norm, block, *args):
        """x plus a block of it, normalized before the block (norm_first) or after the sum."""
        if self.norm_first:
            return x + block(norm(x), *args)
        return norm(x + block(x, *args))

    def _sa_block(self, x, attn_mask, key_padding_mask):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return getattr(self, f"dropout{self._blocks}")(x)  # the last block's dropout


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention then a feed-forward block, each with dropout, a residual and LayerNorm
    (after each, or before with norm_first), as torch.nn.TransformerEncoderLayer."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, device=None,
                 dtype=None):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, device, dtype)

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        x = self._residual(src, self.norm1, self._sa_block, src_mask, src_key_padding_mask)
        return self._residual(x, self.norm2, self._ff_block)


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention, attention to the encoder's memory, then feed-forward, as
    torch.nn.TransformerDecoderLayer."""
    _blocks = 3

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, device=None,
                 dtype=None):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, device, dtype)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None):
        x = self._residual(tgt, self.norm1, self._sa_block, tgt_mask, tgt_key_padding_mask)
        x = self._residual(x, self.norm2, self._mha_block, memory, memory_mask,
                           memory_key_padding_mask)
        return self._residual(x, self.norm3, self._ff_block)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, need_weights=False)[0]
        return self.dropout2(x)


def _get_clones(module, n):
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


class _LayerStack(Module):
    def __init__(self, layer, num_layers, norm):
        super().__init__()
        self.layers = _get_clones(layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm


class TransformerEncoder(_LayerStack):
    """num_layers copies of encoder_layer (independent parameters), then an optional norm."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__(encoder_layer, num_layers, norm)

    def forward(self, src, mask=None, src_key_padding_mask=None):
        out = src
        for mod in self.layers:
            out = mod(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
        return self.norm(out) if self.norm is not None else out


class TransformerDecoder(_LayerStack):
    """num_layers copies of decoder_layer, each attending to the same memory, then a norm."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__(decoder_layer, num_layers, norm)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None):
        out = tgt
        for mod in self.layers:
            out = mod(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask)
        return self.norm(out) if self.norm is not None else out


class Transformer(Module):
    """Encoder-decoder Transformer (torch.nn.Transformer); parameters with more than one dim
    xavier-uniform initialized."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation=F.relu, custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-5, batch_first=False, norm_first=False,
                 device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}

        def stack(custom, layer_cls, stack_cls, num_layers):
            if custom is not None:
                return custom
            layer = layer_cls(d_model, nhead, dim_feedforward, dropout, activation,
                              layer_norm_eps, batch_first, norm_first, **kw)
            return stack_cls(layer, num_layers, LayerNorm(d_model, eps=layer_norm_eps, **kw))

        self.encoder = stack(custom_encoder, TransformerEncoderLayer, TransformerEncoder,
                             num_encoder_layers)
        self.decoder = stack(custom_decoder, TransformerDecoderLayer, TransformerDecoder,
                             num_decoder_layers)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None):
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """[sz, sz] float mask: -inf above the diagonal, 0 elsewhere."""
        return _C.triu(_C.full([sz, sz], float("-inf"), dtype=dtype or _C.float32), 1)


def _cpp_class(name, doc):
    cpp_cls = getattr(_C.nn, name)

    def __init__(self, *args, **kwargs):
        extra = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        _CppModule.__init__(self, cpp_cls(*args, **kwargs), extra)

    return type(name, (_CppModule,), {"__init__": __init__, "__doc__": doc})


TransformerBlock = _cpp_class("TransformerBlock", "Kiln's pre-LayerNorm GPT block (causal by "
                              "default; MoE MLP with moe_experts > 0), a C++ module.")
MoE = _cpp_class("MoE", "Mixture of experts with top-k routing; route(x) gives (y, aux_loss).")
