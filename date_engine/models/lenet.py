"""LeNet-5 (LeCun et al., 1998) as the paper's MNIST application uses it, sized to the input.

Two 5×5 convolutions (6 and 16 maps) with 2×2 max pooling, then 120 → 84 → classes. On 28×28 MNIST
this is the classic layout (16·5·5 features); on small images such as scikit-learn's 8×8 digits the
second convolution is padded so that a 2×2 map survives the second pooling.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["LeNet"]


class LeNet(nn.Module):
    def __init__(self, in_channels: int = 1, image_size: int = 28, num_classes: int = 10) -> None:
        super().__init__()
        pad2 = 0 if image_size >= 16 else 2
        side = ((image_size // 2) - 4 + 2 * pad2) // 2
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5, padding=pad2), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * side * side, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


if __name__ == "__main__":  # pragma: no cover - shape check
    for size in (8, 28):
        print(size, LeNet(image_size=size)(torch.zeros(2, 1, size, size)).shape)
