"""AdaptiveLogSoftmaxWithLoss (torch.nn's): a head over the frequent classes and one cluster
token per tail cluster, each tail a low-rank two-layer projection, so large vocabularies cost
less; forward gives (output, loss) as torch's _ASMoutput."""
from collections import namedtuple

from ... import _C
from .container import ModuleList, Sequential
from .linear import Linear
from .module import Module

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False,
                 device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if (cutoffs != sorted(cutoffs) or min(cutoffs, default=0) <= 0
                or max(cutoffs, default=0) > n_classes - 1 or len(set(cutoffs)) != len(cutoffs)
                or any(int(c) != c for c in cutoffs)):
            raise _C.ValueError("[AdaptiveLogSoftmaxWithLoss] cutoffs should be a sequence of "
                                "unique, positive integers sorted in an increasing order, where "
                                "each value is between 1 and n_classes-1")
        kw = {"device": device, "dtype": dtype}
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, **kw)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hsz, bias=False, **kw),
                                        Linear(hsz, osz, bias=False, **kw)))

    def reset_parameters(self):
        self.head.reset_parameters()
        for seq in self.tail:
            for m in seq:
                m.reset_parameters()

    def forward(self, input, target):
        who = "AdaptiveLogSoftmaxWithLoss"
        batched = input.dim() == 2
        if not batched:
            if input.dim() != 1 or target.dim() != 0:
                raise _C.ValueError(f"[{who}] 1-D input needs a 0-D target")
            input, target = input.unsqueeze(0), target.unsqueeze(0)
        elif target.dim() != 1 or target.shape[0] != input.shape[0]:
            raise _C.ValueError(f"[{who}] Input and target should have the same size in the "
                                f"batch dimension.")
        B = input.shape[0]
        tg = [int(v) for v in target.tolist()]
        if any(t < 0 or t >= self.n_classes for t in tg):
            raise _C.IndexError(f"[{who}] Target values should be in [0, {self.n_classes - 1}], "
                                f"but values in range [{min(tg)}, {max(tg)}] were found. ")
        gather_inds = list(tg)
        output = _C.zeros(B, dtype=input.dtype)
        bounds = [0] + self.cutoffs
        for i in range(len(bounds) - 1):
            rows = [r for r, t in enumerate(tg) if bounds[i] <= t < bounds[i + 1]]
            if not rows or i == 0:
                continue
            rows_t = _C.tensor(rows, dtype=_C.int64)
            rel = _C.tensor([[tg[r] - bounds[i]] for r in rows], dtype=_C.int64)
            cluster = self.tail[i - 1](input.index_select(0, rows_t))
            local = _C.gather(_C.log_softmax(cluster, 1), 1, rel).squeeze(1)
            output = _C.index_add(output, 0, rows_t, local)
            for r in rows:
                gather_inds[r] = self.shortlist_size + i - 1
        head_logprob = _C.log_softmax(self.head(input), 1)
        idx = _C.tensor([[g] for g in gather_inds], dtype=_C.int64)
        output = output + _C.gather(head_logprob, 1, idx).squeeze(1)
        loss = (-output).mean()
        if not batched:
            output = output.squeeze(0)
        return _ASMoutput(output, loss)

    def log_prob(self, input):
        """Log-probabilities of every class: [N, n_classes]."""
        head_logprob = _C.log_softmax(self.head(input), -1)
        parts = [head_logprob[..., :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster = _C.log_softmax(self.tail[i](input), -1)
            parts.append(cluster + head_logprob[..., self.shortlist_size + i].unsqueeze(-1))
        return _C.cat(parts, -1)

    def predict(self, input):
        """The most likely class of each row."""
        return self.log_prob(input).argmax(-1)
