"""kiln.utils: torch.utils' data package (kiln.utils.data)."""
from . import data  # noqa: F401
