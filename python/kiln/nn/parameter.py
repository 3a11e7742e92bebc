"""kiln.nn.parameter: where torch programs import Parameter from (torch.nn.parameter)."""
from .modules.module import Parameter  # noqa: F401
