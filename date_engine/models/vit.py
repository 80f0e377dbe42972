"""A small Vision Transformer (Dosovitskiy et al., ICLR 2021) for 28×28 grey images.

The image is cut into ``patch``×``patch`` patches (a strided convolution: one linear map per patch),
a learned class token is put in front, learned position embeddings are added, and a pre-LN encoder
(:mod:`date_engine.models.transformer`) reads the sequence; the class token's output, through a
linear head, gives the logits. At patch 4 an MNIST image is 49 patches + 1 token.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from date_engine.models.transformer import Encoder, init_weights

__all__ = ["ViT"]


class ViT(nn.Module):
    def __init__(self, image_size: int = 28, patch: int = 4, channels: int = 1, dim: int = 64,
                 layers: int = 4, heads: int = 4, mlp: int = 128, num_classes: int = 10,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if image_size % patch:
            raise ValueError(f"patch {patch} does not tile an image of {image_size} pixels")
        tokens = (image_size // patch) ** 2 + 1
        self.patches = nn.Conv2d(channels, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.position = nn.Parameter(torch.zeros(1, tokens, dim))
        self.encoder = Encoder(dim, layers, heads, mlp, dropout)
        self.head = nn.Linear(dim, num_classes)
        init_weights(self)
        nn.init.normal_(self.position, std=0.02)
        nn.init.zeros_(self.head.weight)  # ViT's zero-initialised head: every class equal at first

    def forward(self, x: Tensor) -> Tensor:
        x = self.patches(x).flatten(2).transpose(1, 2)  # (batch, patches, dim)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.position
        return self.head(self.encoder(x)[:, 0])
