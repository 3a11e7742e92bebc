"""kiln.nn: Module, subclassable in Python as torch.nn.Module is (write forward, assign
parameters and submodules as attributes), and torch.nn's layers, losses, containers,
initializers (kiln.nn.init), utilities (kiln.nn.utils) and functions (kiln.nn.functional).

    class MLP(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = kiln.nn.Linear(784, 256)
            self.fc2 = kiln.nn.Linear(256, 10)
            self.scale = kiln.nn.Parameter(kiln.ones(10))   # a parameter by assignment
        def forward(self, x):
            return self.fc2(kiln.relu(self.fc1(x))) * self.scale
"""
from . import functional  # noqa: F401
from . import init  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import Module, Parameter, _CppModule  # noqa: F401
from .modules.module import _ParameterMeta  # noqa: F401
from . import utils  # noqa: F401
from . import parallel  # noqa: F401
from .parallel import DataParallel  # noqa: F401
from .utils.stateless import functional_call  # noqa: F401

from .. import _C as _C_ext

Tensor = _C_ext.Tensor
del _C_ext
from . import parameter  # noqa: F401,E402
