"""A GNMT-style sequence-to-sequence translator (Wu et al., 2016), as the paper's GNMT application.

- Encoder: ``layers`` LSTM layers; the first is bidirectional (hidden/2 units each way), residual
  connections from the third layer on.
- Decoder: ``layers`` LSTM layers. The first layer's output queries a normalised Bahdanau attention
  over the encoder's outputs; the attention context goes into every further layer, with residual
  connections from the third layer on.
- Source and target share one embedding (a joint vocabulary); a linear classifier over it.

``hidden`` and ``layers`` default to the paper's 1024 and 4; set them smaller to train on a CPU.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

__all__ = ["GNMT", "NormalizedBahdanauAttention"]


class NormalizedBahdanauAttention(nn.Module):
    """score(q, k) = (g · v/‖v‖) · tanh(W_q q + W_k k + b) (Bahdanau et al.; Salimans & Kingma's
    weight normalisation of v, as GNMT uses it)."""

    def __init__(self, query_size: int, key_size: int, size: int) -> None:
        super().__init__()
        self.query = nn.Linear(query_size, size, bias=False)
        self.key = nn.Linear(key_size, size, bias=False)
        self.v = nn.Parameter(torch.empty(size).uniform_(-0.1, 0.1))
        self.g = nn.Parameter(torch.tensor(1.0 / math.sqrt(size)))
        self.b = nn.Parameter(torch.zeros(size))

    def project_keys(self, keys: Tensor) -> Tensor:
        return self.key(keys)

    def forward(
        self, queries: Tensor, keys: Tensor, projected_keys: Tensor, mask: Tensor
    ) -> Tensor:
        """queries [B, T, Q], keys [B, S, K], mask [B, S] (True = a real token) -> context [B, T,
        K]."""
        v = self.g * self.v / self.v.norm()
        energy = torch.tanh(self.query(queries).unsqueeze(2) + projected_keys.unsqueeze(1) + self.b)
        scores = energy @ v  # [B, T, S]
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        return torch.softmax(scores, dim=-1) @ keys


class GNMT(nn.Module):
    def __init__(
        self, vocab: int, hidden: int = 1024, layers: int = 4, dropout: float = 0.2, pad: int = 0
    ) -> None:
        super().__init__()
        if hidden % 2 or layers < 2:
            raise ValueError("GNMT needs an even hidden size and at least 2 layers")
        self.pad = pad
        self.embed = nn.Embedding(vocab, hidden, padding_idx=pad)
        self.drop = nn.Dropout(dropout)
        self.enc_first = nn.LSTM(hidden, hidden // 2, batch_first=True, bidirectional=True)
        self.enc_rest = nn.ModuleList(
            nn.LSTM(hidden, hidden, batch_first=True) for _ in range(layers - 1)
        )
        self.dec_first = nn.LSTM(hidden, hidden, batch_first=True)
        self.attention = NormalizedBahdanauAttention(hidden, hidden, hidden)
        self.dec_rest = nn.ModuleList(
            nn.LSTM(2 * hidden, hidden, batch_first=True) for _ in range(layers - 1)
        )
        self.classifier = nn.Linear(hidden, vocab)
        for name, p in self.named_parameters():
            if name not in ("attention.g", "attention.b"):
                nn.init.uniform_(p, -0.1, 0.1)
        with torch.no_grad():
            self.embed.weight[pad].zero_()

    def encode(self, src: Tensor, lengths: Tensor) -> Tensor:
        x = self.drop(self.embed(src))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        x, _ = pad_packed_sequence(
            self.enc_first(packed)[0], batch_first=True, total_length=src.shape[1]
        )
        for i, lstm in enumerate(self.enc_rest):  # encoder layers 2..L
            y, _ = lstm(self.drop(x))
            x = y + x if i >= 1 else y  # residual from layer 3 on
        return x

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        projected: Tensor,
        mask: Tensor,
        state: list | None = None,
    ) -> tuple[Tensor, list]:
        state = state or [None] * (1 + len(self.dec_rest))
        x, first = self.dec_first(self.drop(self.embed(tgt_in)), state[0])
        context = self.attention(x, memory, projected, mask)
        states = [first]
        for i, lstm in enumerate(self.dec_rest):  # decoder layers 2..L
            y, s = lstm(self.drop(torch.cat([x, context], dim=-1)), state[i + 1])
            x = y + x if i >= 1 else y
            states.append(s)
        return self.classifier(self.drop(x)), states

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits [B, T, vocab]."""
        memory = self.encode(src, src_len)
        logits, _ = self.decode(
            tgt_in, memory, self.attention.project_keys(memory), src != self.pad
        )
        return logits

    @torch.no_grad()
    def translate(
        self, src: Tensor, src_len: Tensor, bos: int, eos: int, max_len: int
    ) -> list[list[int]]:
        """Greedy decoding: the most likely token at each step, until </s> or ``max_len``."""
        memory = self.encode(src, src_len)
        projected, mask = self.attention.project_keys(memory), src != self.pad
        token = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        state, out = None, []
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            logits, state = self.decode(token, memory, projected, mask, state)
            token = logits[:, -1].argmax(-1, keepdim=True)
            out.append(token)
            done |= token.squeeze(1) == eos
            if bool(done.all()):
                break
        result = []
        for row in torch.cat(out, dim=1).tolist():
            result.append(row[: row.index(eos)] if eos in row else row)
        return result
