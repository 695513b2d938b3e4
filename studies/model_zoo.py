"""The models of the whole-model benchmark, built here with random weights (nothing is
downloaded): ResNet-18 with torchvision's architecture, and one BERT-base encoder layer."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: two 3x3 convolutions with batch norm, a shortcut."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return torch.relu(out + shortcut)


class ResNet18(nn.Module):
    """torchvision's ``resnet18`` (layers 2-2-2-2, 1000 classes)."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers: list[nn.Module] = []
        inplanes = 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes)]
            inplanes = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(torch.mean(x, dim=(2, 3)), 1))


class BertLayer(nn.Module):
    """One BERT-base encoder layer (hidden 768, 12 heads, FFN 3072, GELU, post-norm)."""

    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, ffn)
        self.down = nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(x).split(hidden, dim=-1)
        shape = (batch, seq, self.heads, hidden // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        scores = torch.softmax(q @ k.transpose(-1, -2) / (hidden // self.heads) ** 0.5, dim=-1)
        context = (scores @ v).transpose(1, 2).reshape(batch, seq, hidden)
        x = self.norm1(x + self.out(context))
        return self.norm2(x + self.down(nn.functional.gelu(self.up(x))))


def model(name: str, seed: int = 0) -> tuple[nn.Module, list[torch.Tensor]]:
    """The model `name` (one of `MODELS`) in eval mode with seeded random weights, and an
    example input."""
    torch.manual_seed(seed)
    if name == "resnet18":
        net: nn.Module = ResNet18()
        example = [torch.randn(1, 3, 224, 224)]
    elif name == "bert-layer":
        net = BertLayer()
        example = [torch.randn(1, 128, 768)]
    elif name == "tiny-cnn":  # for --quick
        net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                            nn.Linear(8 * 8 * 8, 10))  # fmt: skip
        example = [torch.randn(1, 3, 8, 8)]
    else:
        raise ValueError(f"unknown model {name!r}; one of {MODELS}")
    return net.eval(), example


MODELS = ("resnet18", "bert-layer", "tiny-cnn")


def describe(net: Any) -> str:
    """The model's class and its parameter count."""
    millions = sum(p.numel() for p in net.parameters()) / 1e6
    return f"{type(net).__name__}, {millions:.1f} M parameters"
