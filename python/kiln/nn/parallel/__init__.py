"""kiln.nn.parallel: DataParallel as torch's behaves on a machine without GPUs: it runs the
wrapped module directly (its parameters under the `module.` prefix, as torch's)."""
from ..modules.module import Module


class DataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        # torch without a GPU keeps the module and ignores device_ids; so does Kiln.
        self.module = module
        self.device_ids, self.output_device, self.dim = [], None, dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0,
                  module_kwargs=None):
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    return module(*inputs, **(module_kwargs or {}))
