#!/usr/bin/python3
"""Exports the real-model cases of tests/onnx/test_onnx_models.cpp with PyTorch 1.13's
torch.onnx.export: a torchvision-style ResNet (conv-BN-ReLU, basic blocks with residual and
downsample connections, max pool, global average pool, linear), a Transformer encoder block
(multi-head attention, LayerNorm, GELU feed-forward) and a 2-layer LSTM. Each goes to
OUT/<name>/model.onnx with input_<k>.pb / output_<k>.pb (TensorProto, PyTorch's outputs in eval
mode). Seeded, so reruns give the same files. Usage: export_models.py OUT [name ...]"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet layout (stem, 4 stages of basic blocks, pool, fc), narrower."""

    def __init__(self, widths=(16, 32, 64, 128), blocks=(2, 2, 2, 2), classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], widths[0]
        for i, (w, b) in enumerate(zip(widths, blocks)):
            stage = []
            for j in range(b):
                stage.append(BasicBlock(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class TransformerBlock(nn.Module):
    def __init__(self, d=64, heads=4, ff=256):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                                batch_first=True)
        self.head = nn.Linear(d, d)

    def forward(self, x):
        return self.head(self.layer(x))


class LSTMModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 32, num_layers=2)
        self.fc = nn.Linear(32, 8)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y)


class RecurrentMix(nn.Module):
    """The recurrent forms torch exports, through the importer's fused rnn_sequence: a
    bidirectional 2-layer GRU (batch_first, its initial state an input), a bidirectional relu RNN
    and an LSTM of 17 units (a partial vector block), with its final states as outputs."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 24, num_layers=2, batch_first=True, bidirectional=True)
        self.rnn = nn.RNN(48, 20, nonlinearity="relu", batch_first=True, bidirectional=True)
        self.lstm = nn.LSTM(40, 17, batch_first=True)
        self.fc = nn.Linear(17, 5)

    def forward(self, x, h0):
        y, _ = self.gru(x, h0)
        y, _ = self.rnn(y)
        y, (h, c) = self.lstm(y)
        return self.fc(y), h, c


class Video3d(nn.Module):
    """torchvision's r3d_18 pattern at small widths: Conv3d stems and blocks with BatchNorm3d
    folded, a strided 3-D conv, 3-D max and average pools, a residual add."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False),
                                  nn.BatchNorm3d(8), nn.ReLU())
        self.pool = nn.MaxPool3d(3, 2, 1)
        self.block = nn.Sequential(nn.Conv3d(8, 8, 3, padding=1), nn.ReLU(),
                                   nn.Conv3d(8, 8, 3, padding=1, groups=2))
        self.down = nn.Conv3d(8, 16, 3, 2, 1)
        self.avg = nn.AvgPool3d((1, 2, 2))
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = self.pool(self.stem(x))
        x = torch.relu(x + self.block(x))
        x = self.avg(self.down(x))
        return self.fc(torch.flatten(x.mean((2, 3, 4), keepdim=True), 1))


def swin_tiny():
    """torchvision's Swin Transformer (swin_t's code) at one stage of width 24: its shifted
    windows export the attention mask through ScatterND."""
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=24, depths=[2], num_heads=[2],
                           window_size=[4, 4], num_classes=7)


def randomize_bn(model):
    # Fresh BatchNorm statistics are 0/1, which would hide a wrong mean/var order.
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.BatchNorm3d)):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def cases():
    torch.manual_seed(0)
    resnet = ResNet()
    randomize_bn(resnet)
    x = torch.randn(2, 3, 64, 64)
    yield "resnet", resnet, (x,), 13
    # The same network with its BatchNormalization nodes kept (an eval export folds them into
    # the convolutions).
    yield "resnet_bn", resnet, (x,), 13
    yield "transformer", TransformerBlock(), (torch.randn(2, 10, 64),), 17
    yield "transformer_op13", TransformerBlock(), (torch.randn(2, 10, 64),), 13
    yield "lstm", LSTMModel(), (torch.randn(12, 3, 16),), 14
    yield "recurrent", RecurrentMix(), (torch.randn(3, 10, 8), torch.randn(4, 3, 24)), 17
    # A dynamic batch axis named "batch": its Reshapes read the batch from Shape, so Kiln needs
    # the size at import (ImportOptions::input_shapes; kiln-run takes it from the fed array).
    yield "transformer_dynamic", TransformerBlock(), (torch.randn(2, 10, 64),), 17
    video = Video3d()
    randomize_bn(video)
    yield "video3d", video, (torch.randn(2, 3, 4, 32, 32),), 17
    yield "swin_tiny", swin_tiny(), (torch.randn(1, 3, 32, 32),), 17


def export(out_dir, name, model, inputs, opset):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    model.eval()
    with torch.no_grad():
        outputs = model(*inputs)
    if not isinstance(outputs, tuple):
        outputs = (outputs,)
    path = os.path.join(d, "model.onnx")
    # Outside no_grad: under it, eval-mode TransformerEncoderLayer takes its fused fast path,
    # which 1.13 cannot export.
    mode = (torch.onnx.TrainingMode.PRESERVE if name.endswith("_bn")
            else torch.onnx.TrainingMode.EVAL)
    torch.onnx.export(model, inputs, path, opset_version=opset, training=mode,
                      input_names=[f"input_{k}" for k in range(len(inputs))],
                      output_names=[f"output_{k}" for k in range(len(outputs))],
                      dynamic_axes=({"input_0": {0: "batch"}, "output_0": {0: "batch"}}
                                    if name.endswith("_dynamic") else None))
    onnx.checker.check_model(onnx.load(path))
    for prefix, ts in (("input", inputs), ("output", outputs)):
        for k, t in enumerate(ts):
            p = numpy_helper.from_array(t.detach().numpy().astype(np.float32), f"{prefix}_{k}")
            with open(os.path.join(d, f"{prefix}_{k}.pb"), "wb") as f:
                f.write(p.SerializeToString())


def main():
    out_dir = sys.argv[1]
    only = set(sys.argv[2:])
    torch.set_num_threads(1)
    for name, model, inputs, opset in cases():
        if not only or name in only:
            export(out_dir, name, model, inputs, opset)
            print(f"exported {name} (opset {opset})")


if __name__ == "__main__":
    main()
