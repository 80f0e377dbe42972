"""The paper's LSTM models: MNIST read row by row, and the Penn Treebank language models."""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["RowLSTM", "WordLM"]


class RowLSTM(nn.Module):
    """A 1-layer LSTM over the 28 rows of an MNIST image (28 steps of 28 values): a 28 → hidden
    input transform, ``hidden`` units, and a classifier on the last step's output (paper Table 2).
    """

    def __init__(self, rows: int = 28, hidden: int = 128, num_classes: int = 10) -> None:
        super().__init__()
        self.rows = rows
        self.input = nn.Linear(rows, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        seq = x.reshape(x.shape[0], -1, self.rows)  # (batch, 1, 28, 28) -> (batch, 28 steps, 28)
        h, _ = self.lstm(self.input(seq))
        return self.out(h[:, -1])


class WordLM(nn.Module):
    """Zaremba et al.'s word-level LSTM language model: embedding, ``layers`` LSTM layers of
    ``hidden`` units with dropout between them, and a softmax over the vocabulary."""

    def __init__(
        self,
        vocab: int,
        hidden: int = 200,
        layers: int = 2,
        dropout: float = 0.0,
        init_scale: float = 0.1,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(
            hidden, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0
        )
        self.decoder = nn.Linear(hidden, vocab)
        for p in self.parameters():
            nn.init.uniform_(p, -init_scale, init_scale)

    def forward(self, tokens: Tensor) -> Tensor:
        h, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.decoder(self.drop(h))
