"""kiln.linalg: torch.linalg's names for Kiln's linear-algebra ops (LAPACK underneath), batched
over leading dims, float32 and float64, differentiable where torch.linalg is.

    A = kiln.randn(3, 4, 4, dtype=kiln.float64)
    sign, logabsdet = kiln.linalg.slogdet(A)
    x = kiln.linalg.solve(A, b)
"""
from . import _C

_L = _C.linalg

vector_norm = _L.vector_norm
matrix_norm = _L.matrix_norm
norm = _L.norm
det = _L.det
slogdet = _L.slogdet
inv = _L.inv
solve = _L.solve
cholesky = _L.cholesky
qr = _L.qr
svd = _L.svd
svdvals = _L.svdvals
eigh = _L.eigh
eigvalsh = _L.eigvalsh
pinv = _L.pinv
matrix_rank = _L.matrix_rank
cross = _L.cross
diagonal = _L.diagonal
matmul = _L.matmul


def multi_dot(tensors):
    """A @ B @ C ... of a list of matrices (the first may be 1-D, the last too), as
    torch.linalg.multi_dot; multiplied left to right."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise _C.ValueError("[linalg.multi_dot] expected at least 2 tensors, got "
                            f"{len(tensors)}")
    out = tensors[0]
    for t in tensors[1:]:
        out = _C.matmul(out, t)
    return out


__all__ = ["vector_norm", "matrix_norm", "norm", "det", "slogdet", "inv", "solve", "cholesky",
           "qr", "svd", "svdvals", "eigh", "eigvalsh", "pinv", "matrix_rank", "cross",
           "diagonal", "matmul", "multi_dot"]
