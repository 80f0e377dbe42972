"""A decoder-only transformer language model as nanoGPT's (Karpathy): token and learned position
embeddings, pre-LN blocks with causal self-attention (:class:`~date_engine.models.transformer.
Encoder` with ``causal=True``), a final LayerNorm and an output layer tied to the token embedding.
Weights start from N(0, 0.02²), each block's output projections (attention's and the MLP's
second layer) from N(0, 0.02²/(2·layers)), as nanoGPT's ``_init_weights`` does.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from date_engine.models.transformer import Encoder, init_weights

__all__ = ["GPT"]


class GPT(nn.Module):
    """``forward(ids)``: (batch, tokens) token ids → (batch, tokens, vocab) next-token logits."""

    def __init__(self, vocab: int, block: int, dim: int, layers: int, heads: int,
                 dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        self.block = block
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(block, dim)
        self.drop = nn.Dropout(dropout)
        self.decoder = Encoder(dim, layers, heads, 4 * dim, dropout, causal=True, bias=bias)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as nanoGPT's
        init_weights(self)
        with torch.no_grad():
            for b in self.decoder.blocks:
                for projection in (b.proj.weight, b.mlp[2].weight):
                    nn.init.normal_(projection, std=0.02 / math.sqrt(2 * layers))

    def forward(self, ids: Tensor) -> Tensor:
        t = ids.shape[1]
        if t > self.block:
            raise ValueError(f"a sequence of {t} tokens is longer than the context ({self.block})")
        x = self.tokens(ids) + self.positions(torch.arange(t, device=ids.device))
        return self.head(self.decoder(self.drop(x)))
