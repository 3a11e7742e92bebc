"""kiln.optim: torch.optim's optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax,
NAdam, RAdam, Rprop, ASGD, LBFGS; not SparseAdam: Kiln has no sparse gradients)
with parameter groups, and kiln.optim.lr_scheduler's schedules. The eager optimizers keep
torch's Python surface (param_groups dicts, state, state_dict) and step SGD, Adam, AdamW and
RMSprop with Kiln's C++ optimizers. In a Graph, `kiln.optim.graph.SGD(lr=0.5).minimize(loss)`
(the C++ optimizers themselves, built without parameters) returns one node whose run performs
a training step."""
import types as _types

from .. import _C
from .optimizer import Optimizer, required  # noqa: F401
from ._optimizers import SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, LBFGS  # noqa: F401
from ._more import Adamax, NAdam, RAdam, Rprop, ASGD  # noqa: F401
from . import lr_scheduler  # noqa: F401

clip_grad_norm_ = _C.optim.clip_grad_norm_
clip_grad_value_ = _C.optim.clip_grad_value_

# The C++ optimizers as they are, for graphs (minimize) and for code that wants them directly.
graph = _types.SimpleNamespace(Optimizer=_C.optim.Optimizer, SGD=_C.optim.SGD,
                               Adam=_C.optim.Adam, AdamW=_C.optim.AdamW,
                               RMSprop=_C.optim.RMSprop)
del _types
