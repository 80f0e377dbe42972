"""A pre-LayerNorm transformer: what a BERT-style masked LM, a Vision Transformer and a GPT share.

Each block is x + Attention(LN(x)), then x + MLP(LN(x)) (Xiong et al., 2020: the pre-LN layout
trains without the post-LN warmup sensitivity), with a final LayerNorm after the last block.
Attention is torch's ``scaled_dot_product_attention`` (fused kernels on CUDA, a plain one on the
CPU); the MLP is Linear → GELU → Linear. Weights start from N(0, 0.02²) and biases from 0, as BERT's
and ViT's reference code initialise them; LayerNorms from (1, 0). ``causal=True`` lets each token
attend to itself and those before it (a decoder, as GPT's); ``bias=False`` drops every bias, the
LayerNorms' included (as nanoGPT's ``bias=False``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Encoder", "EncoderBlock", "init_weights"]


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int, dropout: float = 0.0, *,
                 causal: bool = False, bias: bool = True) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"the width {dim} does not split into {heads} heads")
        self.heads, self.dropout, self.causal = heads, dropout, causal
        self.norm1, self.norm2 = nn.LayerNorm(dim, bias=bias), nn.LayerNorm(dim, bias=bias)
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp, bias=bias), nn.GELU(),
                                 nn.Linear(mlp, dim, bias=bias))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, padding: Tensor | None = None) -> Tensor:
        """``x``: (batch, tokens, dim); ``padding``: (batch, tokens), True where a token is
        padding that no query may attend to."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4)
        mask = None if padding is None else ~padding[:, None, None, :]
        attended = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0,
            is_causal=self.causal and mask is None)
        x = x + self.drop(self.proj(attended.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.mlp(self.norm2(x)))


class Encoder(nn.Module):
    """``layers`` blocks of width ``dim`` and a final LayerNorm."""

    def __init__(self, dim: int, layers: int, heads: int, mlp: int, dropout: float = 0.0, *,
                 causal: bool = False, bias: bool = True) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(EncoderBlock(dim, heads, mlp, dropout, causal=causal,
                                                 bias=bias) for _ in range(layers))
        self.norm = nn.LayerNorm(dim, bias=bias)

    def forward(self, x: Tensor, padding: Tensor | None = None) -> Tensor:
        for block in self.blocks:
            x = block(x, padding)
        return self.norm(x)


@torch.no_grad()
def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """N(0, std²) weights and zero biases for every Linear and Embedding, (1, 0) for LayerNorms."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
