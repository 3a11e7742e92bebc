#!/usr/bin/python3
"""A PyTorch program as a PyTorch user writes it, run on Kiln by renaming one import
(`import kiln as torch`): an nn.Module MLP fits a noisy 2-D function from generated data,
with a DataLoader over a TensorDataset, Adam with parameter groups, a cosine schedule, the
usual device idiom, a custom autograd Function, and a checkpoint saved and loaded back.
Usage: torch_port_regression.py [--epochs N] [--batch-size B] [--lr LR] [--checkpoint PATH]"""
import argparse
import math
import os
import tempfile

import kiln as torch  # the only line that differs from the PyTorch version
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.optim.lr_scheduler import CosineAnnealingLR
from kiln.utils.data import DataLoader, TensorDataset, random_split


class SoftClamp(torch.autograd.Function):
    """tanh in the forward pass, a straight-through gradient in the backward pass."""

    @staticmethod
    def forward(ctx, x, limit):
        ctx.limit = limit
        return limit * torch.tanh(x / limit)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None


class Net(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                  nn.ReLU())
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        return SoftClamp.apply(self.head(self.body(x)), 3.0)


def make_data(n, generator):
    x = torch.rand(n, 2, generator=generator) * 4 - 2
    y = torch.sin(x[:, :1] * 1.5) * torch.cos(x[:, 1:]) + 0.05 * torch.randn(n, 1,
                                                                            generator=generator)
    return TensorDataset(x, y)


def evaluate(model, loader, device):
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            total += F.mse_loss(model(x), y, reduction="sum").item()
            count += len(x)
    return total / count


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--checkpoint", default=os.path.join(tempfile.gettempdir(), "kiln_port.pt"))
    args = p.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = make_data(2048, torch.Generator().manual_seed(args.seed))
    train_set, val_set = random_split(data, [0.8, 0.2],
                                      generator=torch.Generator().manual_seed(0))
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=256)

    model = Net().to(device)
    optimizer = torch.optim.Adam([
        {"params": model.body.parameters()},
        {"params": model.head.parameters(), "lr": args.lr * 0.5},
    ], lr=args.lr)
    scheduler = CosineAnnealingLR(optimizer, T_max=args.epochs)

    first = evaluate(model, val_loader, device)
    for epoch in range(1, args.epochs + 1):
        model.train()
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        scheduler.step()
        if epoch % 10 == 0 or epoch == args.epochs:
            print(f"epoch {epoch:3d}  train loss {loss:.4f}  val mse "
                  f"{evaluate(model, val_loader, device):.4f}  lr {scheduler.get_last_lr()[0]:.2e}")

    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "epoch": args.epochs}, args.checkpoint)
    checkpoint = torch.load(args.checkpoint, map_location=device)
    restored = Net().to(device)
    restored.load_state_dict(checkpoint["model"])
    final = evaluate(model, val_loader, device)
    again = evaluate(restored, val_loader, device)
    print(f"val mse {first:.4f} -> {final:.4f}; restored from {args.checkpoint}: {again:.4f}")
    if not (final < 0.5 * first and math.isclose(final, again, rel_tol=1e-6)):
        raise SystemExit("training did not converge or the checkpoint did not restore the model")


if __name__ == "__main__":
    main()
