"""kiln.backends: torch.backends' switches, as a CPU-only torch reports them (cudnn and mps
unavailable; setting cudnn.benchmark or cudnn.deterministic is accepted and changes nothing,
since Kiln's CPU kernels are deterministic already)."""
from . import cudnn, mps, mkldnn, openmp  # noqa: F401
