"""The workload behind the sample traces: a small encoder LM, a CPU-heavy synthetic dataset, analytic FLOPs.

Kept free of side effects on import, so DataLoader workers (fork or spawn) can import it.
See sample_traces/README.md for what each piece stands for.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 512
    n_layers: int = 4
    n_heads: int = 8
    seq_len: int = 256
    vocab: int = 8192
    mlp_ratio: int = 4

    def as_dict(self) -> dict:
        return asdict(self)


FULL = ModelConfig()
QUICK = ModelConfig(d_model=64, n_layers=2, n_heads=4, seq_len=64, vocab=512)


# --------------------------------------------------------------------------------------------- model
class Block(nn.Module):
    """Pre-LN transformer block: LN -> QKV Linear -> non-causal SDPA -> out-proj Linear (+res),
    LN -> Linear d->4d -> GELU -> Linear 4d->d (+res)."""

    def __init__(self, d: int, n_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        assert d % n_heads == 0
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, mlp_ratio * d)
        self.fc2 = nn.Linear(mlp_ratio * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.n_heads
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (b, h, s, d/h)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class EncoderLM(nn.Module):
    """Token + learned position embedding, L blocks, final LN, LM head Linear(d, vocab)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads, cfg.mlp_ratio) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        x = self.tok(tokens) + self.pos.weight[:s]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def count_params(model: nn.Module) -> dict:
    """All parameters, and the nn.Linear weights alone (the matmul parameters N of 6·N·T)."""
    linear_w = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    emb = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding))
    total = sum(p.numel() for p in model.parameters())
    return {"n_params": total, "n_matmul_params": linear_w, "n_embedding_params": emb,
            "n_other_params": total - linear_w - emb}


FLOPS_FORMULA = (
    "model_flops_per_step = 6*N_matmul*T + 12*B*S^2*d_model*L, "
    "N_matmul = weights of every nn.Linear (QKV, out-proj, MLP fc1/fc2, LM head; no embeddings, "
    "LayerNorm or biases) = L*(3+1+2*mlp_ratio)*d^2 + d*vocab, T = B*S tokens per step, "
    "B = global batch (all ranks); attention term = non-causal SDPA QK^T and AV, "
    "forward 4*B*S^2*d per layer, backward twice that"
)


def analytic_flops(cfg: ModelConfig, batch: int) -> dict:
    """Training FLOPs of one step for `batch` sequences of cfg.seq_len tokens (fwd + bwd).

    Matmuls: 2·N·T forward, 4·N·T backward (input and weight gradients; every Linear's input
    requires grad because the first one's comes from the embedding), so 6·N·T.
    Attention (non-causal): forward QKᵀ 2·B·S²·d + AV 2·B·S²·d per layer, backward twice that.
    """
    d, L, S, V = cfg.d_model, cfg.n_layers, cfg.seq_len, cfg.vocab
    n_matmul = L * (3 + 1 + 2 * cfg.mlp_ratio) * d * d + d * V
    tokens = batch * S
    matmul = 6 * n_matmul * tokens
    attention = 12 * batch * S * S * d * L
    return {"n_matmul_params": n_matmul, "tokens_per_step": tokens,
            "matmul_flops_per_step": matmul, "attention_flops_per_step": attention,
            "model_flops_per_step": matmul + attention, "formula": FLOPS_FORMULA}


# ---------------------------------------------------------------------------------------------- data
class SyntheticTextDataset(Dataset):
    """Masked-LM samples built the way a real text pipeline builds them, on the CPU, in numpy.

    Each item, fully determined by (seed, index):
      1. "read": a compressed record = `bytes_per_token` random bytes per token position;
      2. "decode": FNV-1a hash of each position's bytes -> index into a Zipf-distributed
         vocabulary table (a skewed, realistic token distribution);
      3. "augment": `rounds` rounds of per-token byte-feature normalisation (log1p, centring,
         top-k sort, running mean) that pick noise positions, then BERT-style masking of 15%.
    Returns (inputs int64 [S], targets int64 [S]) with targets = -100 at unmasked positions.
    The work is fixed (not timed), so the data is identical on every machine; its cost is
    measured and written to timing.json (`data.ms_per_sample`).
    """

    MASK_PROB = 0.15

    def __init__(self, n_samples: int, seq_len: int, vocab: int, *, seed: int = 0,
                 bytes_per_token: int = 32, rounds: int = 2) -> None:
        self.n_samples, self.seq_len, self.vocab = n_samples, seq_len, vocab
        self.seed, self.bytes_per_token, self.rounds = seed, bytes_per_token, rounds
        self.mask_id = vocab - 1
        table_rng = np.random.default_rng([seed, 0xC0FFEE])
        ranks = np.arange(1, vocab, dtype=np.float64)  # vocab-1 ids: the last id is [MASK]
        p = 1.0 / ranks ** 1.1
        p /= p.sum()
        # 64K-entry lookup table whose entries follow a Zipf(1.1) law over token ids 0..vocab-2
        self.table = table_rng.choice(np.arange(vocab - 1), size=1 << 16, p=p).astype(np.int64)

    def __len__(self) -> int:
        return self.n_samples

    def __getitem__(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, int(idx)])
        s = self.seq_len
        raw = rng.integers(0, 256, size=(s, self.bytes_per_token), dtype=np.uint8)  # "read"
        # "decode": FNV-1a over each position's bytes
        h = np.full(s, 2166136261, dtype=np.uint64)
        for j in range(self.bytes_per_token):
            h = ((h ^ raw[:, j]) * np.uint64(16777619)) & np.uint64(0xFFFFFFFF)
        tokens = self.table[(h & np.uint64(0xFFFF)).astype(np.int64)]
        # "augment": feature normalisation rounds that choose the span-noise positions
        feats = raw.astype(np.float32)
        noise_score = np.zeros(s, dtype=np.float32)
        for r in range(self.rounds):
            f = np.log1p(feats * (1.0 + 0.125 * r))
            f -= f.mean(axis=1, keepdims=True)
            f /= f.std(axis=1, keepdims=True) + 1e-6
            top = np.sort(f, axis=1)[:, -4:].sum(axis=1)
            noise_score += np.convolve(top, np.ones(5, dtype=np.float32) / 5, mode="same")
        noisy = noise_score > np.quantile(noise_score, 0.97)  # ~3% of positions: random-token noise
        tokens = np.where(noisy, rng.integers(0, self.vocab - 1, size=s), tokens)
        mask = rng.random(s) < self.MASK_PROB
        if not mask.any():
            mask[rng.integers(0, s)] = True
        inputs = np.where(mask, self.mask_id, tokens).astype(np.int64)
        targets = np.where(mask, tokens, -100).astype(np.int64)
        return torch.from_numpy(inputs), torch.from_numpy(targets)


def measure_sample_cost(ds: SyntheticTextDataset, n: int = 64) -> float:
    """Milliseconds per __getitem__ in this process (median of n items, after 4 warm-up items)."""
    for i in range(4):
        ds[i]
    times = []
    for i in range(n):
        t = time.perf_counter()
        ds[1000 + i]
        times.append(time.perf_counter() - t)
    times.sort()
    return 1000.0 * times[len(times) // 2]


def human_flops(x: float) -> str:
    if x <= 0:
        return "0"
    e = min(int(math.log10(x) // 3), 5)
    return f"{x / 10 ** (3 * e):.3f} {['', 'K', 'M', 'G', 'T', 'P'][e]}FLOP"
