"""kiln.onnx.export: torch.onnx.export's signature onto Kiln's ONNX exporter (docs/onnx.md).

The model is traced into a kiln.Graph (one placeholder per input, named by input_names, with
the dims dynamic_axes names left dynamic; parameters become initializers), in eval mode and
without autograd, and the part computing its outputs is written with standard ONNX ops at
opset 17 (onnxruntime runs it). Ops with no standard ONNX form raise a kiln.Error naming them.
"""
import os
import tempfile
import warnings

from . import _C

_T = _C.Tensor
OPSET = 17


class TrainingMode:
    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


def _flatten(out, what):
    if isinstance(out, _T):
        return [out]
    if isinstance(out, (list, tuple)):
        r = []
        for o in out:
            r.extend(_flatten(o, what))
        return r
    if isinstance(out, dict):
        return _flatten(list(out.values()), what)
    raise _C.TypeError(f"[onnx.export] {what} must be tensors (or tuples, lists, dicts of them), "
                       f"got {type(out).__name__}")


def export(model, args, f, export_params=True, verbose=False, training=TrainingMode.EVAL,
           input_names=None, output_names=None, operator_export_type=None,
           opset_version=None, do_constant_folding=True, dynamic_axes=None,
           keep_initializers_as_inputs=None, custom_opsets=None,
           export_modules_as_functions=False):
    """Exports model(*args) to `f` (a path or a binary file object) as ONNX opset 17."""
    if not hasattr(_C, "_export_onnx"):
        raise _C.Error("[onnx.export] this kiln._C was built without the ONNX exporter "
                       "(kiln_onnx, KILN_ONNX=ON)")
    if opset_version is not None and opset_version != OPSET:
        warnings.warn(f"kiln.onnx.export writes opset {OPSET}; opset_version={opset_version} "
                      "is ignored", stacklevel=2)
    if not export_params:
        raise _C.ValueError("[onnx.export] export_params=False is not supported: the "
                            "parameters are written as initializers")
    if isinstance(args, _T):
        args = (args,)
    args = tuple(args)
    kwargs = {}
    if args and isinstance(args[-1], dict):
        args, kwargs = args[:-1], args[-1]
    inputs = [a for a in args if isinstance(a, _T)]
    names = list(input_names or [])
    names += [f"input_{k}" for k in range(len(names), len(inputs))]
    dynamic_axes = dynamic_axes or {}
    for key in dynamic_axes:
        if key not in names and key not in (output_names or []):
            raise _C.ValueError(f"[onnx.export] dynamic_axes names {key!r}, which is neither an "
                                "input nor an output name")
    g = _C.Graph()
    dim_names = {}
    feeds, it = [], iter(names)
    for a in args:
        if not isinstance(a, _T):
            feeds.append(a)
            continue
        name = next(it)
        axes = dynamic_axes.get(name, ())
        axes = set(axes.keys() if isinstance(axes, dict) else axes)
        named = dynamic_axes.get(name, ())
        shape = [None if d in axes or d - a.dim() in axes else s for d, s in enumerate(a.shape)]
        ph = g.placeholder(a.dtype, shape, name=name)
        if None in shape:
            # The example's sizes: x.shape gives kiln.SymInt for the dynamic dims, so code that
            # computes with them (view(B, T, C), x[:, :T], arange(T)) exports symbolically.
            g.set_hint(ph, tuple(a.shape))
            if isinstance(named, dict):
                for d, dn in named.items():
                    dim_names[f"{name}:{d % a.dim()}"] = str(dn)
        feeds.append(ph)
    was_training = getattr(model, "training", None)
    if hasattr(model, "train") and training != TrainingMode.PRESERVE:
        model.train(training == TrainingMode.TRAINING)
    prev = _C.is_grad_enabled()
    _C._set_grad_enabled(False)
    try:
        out = model(*feeds, **kwargs)
    finally:
        _C._set_grad_enabled(prev)
        if was_training is not None and hasattr(model, "train"):
            model.train(was_training)
    outs = _flatten(out, "the model's outputs")
    onames = list(output_names or [])
    onames += [f"output_{k}" for k in range(len(onames), len(outs))]
    if len(onames) != len(outs):
        raise _C.ValueError(f"[onnx.export] {len(onames)} output_names for {len(outs)} outputs")
    if isinstance(f, (str, os.PathLike)):
        _C._export_onnx(str(f), g, onames, outs, dim_names)
        return
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        _C._export_onnx(path, g, onames, outs, dim_names)
        with open(path, "rb") as fh:
            f.write(fh.read())
