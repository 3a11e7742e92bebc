"""Folding an eval-mode BatchNorm into the convolution before it (torch.nn.utils.fusion)."""
import copy

from ... import _C
from ..modules.module import Parameter


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose=False):
    """The weight and bias of one convolution computing conv then batch norm (eval)."""
    if conv_b is None:
        conv_b = _C.zeros_like(bn_rm)
    if bn_w is None:
        bn_w = _C.ones_like(bn_rm)
    if bn_b is None:
        bn_b = _C.zeros_like(bn_rm)
    rsqrt = _C.rsqrt(bn_rv + bn_eps)
    extra = [1] * (conv_w.dim() - 2)
    shape = ([1, -1] if transpose else [-1, 1]) + extra
    w = conv_w * (bn_w * rsqrt).reshape(shape)
    b = (conv_b - bn_rm) * rsqrt * bn_w + bn_b
    return (Parameter(w.detach(), conv_w.requires_grad),
            Parameter(b.detach(), conv_b.requires_grad))


def fuse_conv_bn_eval(conv, bn, transpose=False):
    """A copy of conv with bn (in eval mode, with running statistics) folded in."""
    if conv.training or bn.training:
        raise _C.Error("[fuse_conv_bn_eval] only works in eval mode: call .eval() on both")
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias,
        transpose)
    return fused
