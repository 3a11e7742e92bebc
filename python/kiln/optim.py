"""kiln.optim: SGD, Adam, AdamW and RMSprop (torch.optim's signatures), learning-rate schedules
and gradient clipping. Each optimizer works both ways: eagerly
`SGD(model.parameters(), lr=0.1)` then `zero_grad()/backward()/step()`; in a Graph
`SGD(lr=0.5).minimize(loss)` returns one node whose run performs a training step."""
from . import _C

Optimizer = _C.optim.Optimizer
SGD = _C.optim.SGD
Adam = _C.optim.Adam
AdamW = _C.optim.AdamW
RMSprop = _C.optim.RMSprop
clip_grad_norm_ = _C.optim.clip_grad_norm_
clip_grad_value_ = _C.optim.clip_grad_value_


class lr_scheduler:
    """torch.optim.lr_scheduler's common schedules over Kiln's C++ LRScheduler."""

    @staticmethod
    def StepLR(optimizer, step_size, gamma=0.1):
        return _C.optim.LRScheduler(optimizer, _C.optim.StepLR(step_size, gamma))

    @staticmethod
    def ExponentialLR(optimizer, gamma):
        return _C.optim.LRScheduler(optimizer, _C.optim.ExponentialLR(gamma))

    @staticmethod
    def CosineAnnealingLR(optimizer, T_max, eta_min=0.0):
        return _C.optim.LRScheduler(optimizer, _C.optim.CosineAnnealingLR(T_max, eta_min))

    @staticmethod
    def OneCycleLR(optimizer, max_lr, total_steps, pct_start=0.3, div_factor=25.0,
                   final_div_factor=1e4):
        return _C.optim.LRScheduler(optimizer, _C.optim.OneCycleLR(
            max_lr, total_steps, pct_start, div_factor, final_div_factor))
