"""torch._dynamo's user-facing marks for kiln.jit: mark_dynamic (a dim dynamic from the first
compiled version on) and mark_static (a dim never made dynamic), as `torch._dynamo.mark_dynamic`
is called in PyTorch programs (`import kiln as torch` keeps them working)."""
from . import _C

mark_dynamic = _C.mark_dynamic
mark_static = _C.mark_static


def reset():
    """torch._dynamo.reset(): Kiln keeps compiled versions per jitted function, not in a global
    cache, so there is nothing to clear."""
