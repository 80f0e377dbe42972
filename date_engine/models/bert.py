"""A BERT-style encoder for masked-language modelling (Devlin et al., NAACL 2019), pre-LN.

Token and learned position embeddings, a pre-LN encoder (:mod:`date_engine.models.transformer`),
and BERT's MLM head: Linear → GELU → LayerNorm, then a decoder that shares the token embedding's
weights (tied) with a bias of its own. Defaults: 2 layers of width 128, 4 heads, an MLP of 512 —
about 1M parameters with an 8k vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from date_engine.models.transformer import Encoder, init_weights

__all__ = ["MaskedLM"]


class MaskedLM(nn.Module):
    def __init__(self, vocab: int, seq_len: int = 128, dim: int = 128, layers: int = 2,
                 heads: int = 4, mlp: int = 512, dropout: float = 0.0) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(seq_len, dim)
        self.encoder = Encoder(dim, layers, heads, mlp, dropout)
        self.transform = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim))
        self.bias = nn.Parameter(torch.zeros(vocab))
        init_weights(self)

    def forward(self, ids: Tensor, select: Tensor | None = None,
                padding: Tensor | None = None) -> Tensor:
        """Logits over the vocabulary: at every position, (batch, tokens, vocab); or, with a
        boolean ``select`` of ``ids``' shape, at the selected positions only, (selected, vocab) —
        the masked ones, where the loss is: the head is then computed on ~15% of the tokens.
        ``padding`` (True at padding tokens, no query attends to them) is for batches that have
        any; bert-mlm's packed blocks have none."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.position(positions)
        x = self.encoder(x, padding)
        if select is not None:
            x = x[select]
        return F.linear(self.transform(x), self.tokens.weight, self.bias)
