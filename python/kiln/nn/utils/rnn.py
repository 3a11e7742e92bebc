"""Packed sequences (torch.nn.utils.rnn): PackedSequence, pack_padded_sequence,
pad_packed_sequence, pad_sequence and pack_sequence; kiln.nn's RNN, LSTM and GRU accept a
PackedSequence and run each sequence only over its own length."""
from collections import namedtuple

from ... import _C

_Packed = namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices",
                                        "unsorted_indices"])


class PackedSequence(_Packed):
    """data [sum(batch_sizes), *] time-major (step t holds the batch_sizes[t] longest
    sequences), batch_sizes int64 [T], and the sort permutation and its inverse (or None)."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = _invert(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        data = self.data.to(*args, **kwargs) if args or kwargs else self.data
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    @property
    def is_cuda(self):
        return False

    def is_pinned(self):
        return False


def _invert(perm):
    inv = [0] * perm.numel()
    for i, p in enumerate(perm.tolist()):
        inv[p] = i
    return _C.tensor(inv, dtype=_C.int64)


def _lengths_list(lengths):
    if isinstance(lengths, _C.Tensor):
        return [int(v) for v in lengths.reshape(-1).tolist()]
    return [int(v) for v in lengths]


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    lens = _lengths_list(lengths)
    B = input.shape[0] if batch_first else input.shape[1]
    if len(lens) != B:
        raise _C.ValueError(f"[pack_padded_sequence] {len(lens)} lengths for a batch of {B}")
    if any(n <= 0 for n in lens):
        raise _C.ValueError("[pack_padded_sequence] every length must be positive, got "
                            f"{lens}")
    x = input.transpose(0, 1) if batch_first else input  # [T, B, *]
    if enforce_sorted:
        if any(lens[i] < lens[i + 1] for i in range(len(lens) - 1)):
            raise _C.ValueError("[pack_padded_sequence] `lengths` array must be sorted in "
                                "decreasing order when `enforce_sorted` is True. You can pass "
                                "`enforce_sorted=False` to pack_padded_sequence and/or "
                                "pack_sequence to sidestep this requirement if you do not need "
                                "ONNX exportability.")
        sorted_indices = None
    else:
        order = sorted(range(B), key=lambda i: -lens[i])
        sorted_indices = _C.tensor(order, dtype=_C.int64)
        x = x.index_select(1, sorted_indices)
        lens = [lens[i] for i in order]
    if lens[0] > x.shape[0]:
        raise _C.ValueError(f"[pack_padded_sequence] length {lens[0]} exceeds the padded "
                            f"length {x.shape[0]}")
    batch_sizes = [sum(1 for n in lens if n > t) for t in range(lens[0])]
    data = _C.cat([x[t, :bs] for t, bs in enumerate(batch_sizes)], 0)
    return PackedSequence(data, _C.tensor(batch_sizes, dtype=_C.int64), sorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded [T, B, *] or [B, T, *], lengths int64)."""
    data, bsz = sequence.data, [int(v) for v in sequence.batch_sizes.tolist()]
    B, T = bsz[0], len(bsz)
    if total_length is not None:
        if total_length < T:
            raise _C.ValueError(f"[pad_packed_sequence] total_length {total_length} is less "
                                f"than the longest sequence {T}")
    rest = list(data.shape[1:])
    rows, off = [], 0
    for bs in bsz:
        step = data[off:off + bs]
        if bs < B:
            fill = _C.full([B - bs] + rest, padding_value, dtype=data.dtype)
            step = _C.cat([step, fill], 0)
        rows.append(step)
        off += bs
    for _ in range(T, total_length or T):
        rows.append(_C.full([B] + rest, padding_value, dtype=data.dtype))
    out = _C.stack(rows, 0)
    lengths = [sum(1 for bs in bsz if bs > b) for b in range(B)]
    if sequence.unsorted_indices is not None:
        out = out.index_select(1, sequence.unsorted_indices)
        lengths = [lengths[i] for i in sequence.unsorted_indices.tolist()]
    if batch_first:
        out = out.transpose(0, 1)
    return out, _C.tensor(lengths, dtype=_C.int64)


def _pack_sorted(padded, like):
    """padded [T, B, *] in `like`'s sorted batch order, packed with like's batch sizes."""
    bsz = [int(v) for v in like.batch_sizes.tolist()]
    data = _C.cat([padded[t, :bs] for t, bs in enumerate(bsz)], 0)
    return PackedSequence(data, like.batch_sizes, like.sorted_indices, like.unsorted_indices)


def pad_sequence(sequences, batch_first=False, padding_value=0.0):
    """Tensors [L_i, *] to one [max L, B, *] (or [B, max L, *]) padded with padding_value."""
    seqs = list(sequences)
    if not seqs:
        raise _C.ValueError("[pad_sequence] received an empty list of sequences")
    T = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        if s.shape[0] < T:
            fill = _C.full([T - s.shape[0]] + list(s.shape[1:]), padding_value, dtype=s.dtype)
            s = _C.cat([s, fill], 0)
        padded.append(s)
    return _C.stack(padded, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted=True):
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :n] for i, n in enumerate(_lengths_list(lengths))]


def unpack_sequence(packed_sequences):
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
