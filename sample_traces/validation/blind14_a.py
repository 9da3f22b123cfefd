"""The fourteenth blind part's cases v201-v208 (merged by record_blind14.py): eight one-GPU pairs,
each on a model family no earlier case used. Activation checkpointing dropped from an ESM-2-style
protein language model that leaves most of the GPU's memory free (v201); a fused AdamW over the 311
parameter tensors of a SAINT-style tabular transformer, 240 of them its per-feature MLPs (v202);
cuDNN's benchmark on an ENet-style segmenter of dilated, asymmetric 5x1 / 1x5, 2x2-strided and
transposed convolutions (v203); the 21 per-layer ``.item()`` reads of an EGNN-style equivariant
graph network's log (v204); bf16 autocast on a DPN-style dual path network in NCHW whose
convolutions already run TF32 planted (cuDNN's default), so that the pair asks what bf16 adds
beyond TF32 (v205); CUDA graphs (torch.compile's ``reduce-overhead``) on an eager Decision
Transformer-style policy of ~350 kernels of a few microseconds (v206); and two pairs chosen to gain
nothing: ``model.compile()`` of an OPT-style decoder whose step is large bf16 matmuls, each
elementwise op alone between two of them (v207), and 2 x the batch of a DnCNN-style denoiser whose
every kernel already fills the GPU (v208).

Each builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model); planted and fixed
build the same model from the same seed and differ only in the planted thing. Sizes come from
FLOP, byte and launch counts over one step at full size on the meta device (FLOPs from torch's
FlopCounterMode; bytes from the inputs and outputs of each aten op but the matmuls and
convolutions; kernels from the aten ops dispatched, the attention's math counted as one flash
kernel each way, plus autocast's casts; not timed: nothing here ran on a GPU before the part was
fixed). Each builder's comment gives its estimate of one step on an H200 (bf16 matmuls at
~600-700 TFLOP/s, fp32 without TF32 at ~45-55, memory at ~3.5-4 TB/s), with the host time at
~10 and ~25 us an eager launch; the one-GPU cases recorded before ran up to ~1.5-2 x their
estimates (v193 35-45 ms estimated fixed, 66 timed; v200 18-22, 38-42), so each estimate is
aimed at 10-35 ms.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import FP32_TF32, Kit, compile_in_place, precision_loss  # noqa: E402

CASES: dict[str, dict] = {
    "v201": {
        "name": "activation_checkpointing",
        "model": "ESM-2-style protein language model (ESM-2 650M's width: the 33-token ESM "
        "alphabet, token dropout of the masked positions' embeddings rescaled as ESM-2's; 12 "
        "of its 33 pre-LayerNorm layers d 1280, 20 heads of 64 with rotary position "
        "embeddings on queries and keys, scaled_dot_product_attention, MLP 5120 with GELU; a "
        "final LayerNorm and ESM's LM head (Linear, GELU, LayerNorm, the embedding tied, a "
        "bias); 236 M parameters) masked-LM on 6 protein crops of 1024 tokens (15 % of the "
        "residues masked, 80/10/10), bf16 autocast, AdamW(fused=True): the layers' large "
        "matmuls most of the step; ~10 GB of the GPU's 141 used, most of its memory free",
        "planted": "torch.utils.checkpoint (use_reentrant=False) on every layer (12 nn.Modules, "
        "each recomputed in the backward)",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v202": {
        "name": "optimizer_fused",
        "model": "SAINT-style tabular transformer (60 numeric features, each embedded by its own "
        "MLP 1-100-32 with ReLU, and 4 categorical ones and a CLS column by one offset "
        "embedding table, d 32: 65 tokens a row; 3 layers of column attention (pre-LayerNorm, "
        "8 heads of 16, dropout 0.1) and a GEGLU feed-forward 4 x, then intersample attention "
        "across the batch's 256 rows on each row's 65 x 32 = 2080 values flattened, and a "
        "GEGLU feed-forward on them; an MLP 32-1000-2 on the CLS token, cross-entropy; 311 "
        "parameter tensors, 159 M parameters), batch 256, fp32 (TF32 off for matmuls), weight "
        "decay 0.01: ~850 kernels a step, a third of them the per-feature MLPs'",
        "planted": "AdamW(foreach=False): a Python loop of ~9 kernels per parameter tensor "
        "(311 tensors)",
        "fix": "AdamW(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v203": {
        "name": "cudnn_benchmark",
        "model": "ENet-style real-time segmenter (ENet's layout: an initial block of a strided "
        "3x3 conv 3-13 beside a 3x3 max pool; a downsampling bottleneck and 4 more, 64 ch at "
        "1/4; a downsampling one and 2 stages of 8, 128 ch at 1/8; each a 1x1 (2x2 stride-2 where it downsamples) projection "
        "to a quarter of the channels, a main conv that is a 3x3, a 3x3 dilated 2, 4, 8 or 16, "
        "or an asymmetric 5x1 then 1x5, and a 1x1 expansion, BatchNorm, PReLU, spatial dropout; "
        "the downsampling ones' max pools kept for the decoder's max unpooling; a decoder of 3 "
        "and 2 bottlenecks with 3x3 stride-2 transposed convs and ReLU; a 3x3 stride-2 "
        "transposed conv to 19 classes, cross-entropy; 0.36 M parameters) on 512x1024 "
        "street-scene-like images, batch 12, NCHW, fp32 with cuDNN TF32 (TF32 off for matmuls), "
        "AdamW(fused=True); the input size never changes",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v204": {
        "name": "host_sync",
        "model": "EGNN-style E(n)-equivariant graph network on QM9-like molecules (128 "
        "molecules of 10-29 atoms padded to 29, one-hot atom types H/C/N/O/F, 3-D positions; "
        "fully connected within each molecule, dense (128 x 29 x 29 pairs); 7 equivariant "
        "layers d 128: an edge MLP of both atoms' features and their squared distance (SiLU), "
        "a sigmoid attention gate, a coordinate MLP moving each atom along its normalised "
        "differences, a node MLP on the summed messages, residual; a node and a graph MLP "
        "after sum pooling, L1 on a regression target), fp32 (TF32 off for matmuls), "
        "AdamW(fused=True): ~650 kernels a step of ~2-100 us of GPU each",
        "planted": "each layer's largest coordinate shift, mean message norm and gradient norm "
        "read with .item() every step for the log (21 syncs: 14 in the forward, 7 after the "
        "backward)",
        "fix": "the same 21 values kept on the GPU (stacked and summed into a log tensor, never "
        "read in the step)",
        "expected_fix": "host_sync",
    },
    "v205": {
        "name": "mixed_precision",
        "model": "DPN-style dual path network (DPN-68: a 3x3 stride-2 stem 10 ch and 3x3 max "
        "pool; 22 dual path blocks in 4 stages of 3/4/12/3 at 56, 28, 14 and 7 pixels, each "
        "pre-activation BatchNorm and ReLU before a 1x1 conv, a 3x3 conv of 32 groups (128-1024 "
        "ch) and a 1x1 conv whose output is split into a residual path of 64-512 ch, added, "
        "and a densely connected path growing by 16-64 ch a block, concatenated; the first "
        "block of a stage projects both paths; BatchNorm, ReLU, a global pool and a 1x1 conv "
        "to 1000 classes; 12.6 M parameters) on 224x224 images, batch 96, NCHW (the default "
        "memory format), AdamW(fused=True); the convolutions run TF32 in both variants "
        "(cuDNN's default), matmul TF32 off (PyTorch's default)",
        "planted": "fp32 with PyTorch's default TF32 flags (cuDNN convolutions TF32)",
        "fix": "bf16 autocast (the TF32 flags unchanged)",
        "expected_fix": "mixed_precision",
    },
    "v206": {
        "name": "cuda_graphs",
        "model": "Decision Transformer-style offline RL policy (HalfCheetah-like 17-D states "
        "and 6-D actions; returns-to-go, states and actions each embedded by a Linear to d 128 "
        "plus a learned timestep embedding, interleaved into 60 tokens for a context of 20 "
        "steps, LayerNorm; a GPT-2-style causal transformer without positions of 8 pre-"
        "LayerNorm blocks, 4 heads of 32, scaled_dot_product_attention, MLP 512 with tanh-GELU, "
        "no dropout; each state token's output to the action by a Linear and tanh, MSE) on 64 "
        "trajectory windows, fp32 (TF32 off for matmuls), AdamW(fused=True) eager, no "
        "torch.compile planted: ~350 kernels a step of a few microseconds each, the step bound "
        "by their launches",
        "planted": "eager: each of the step's ~350 small kernels launched from Python",
        "fix": "torch.compile(model, mode='reduce-overhead') (as model.compile(mode="
        "'reduce-overhead'), gpuscope's cuda_graphs code: forward and backward replayed as "
        "CUDA graphs, the optimizer step eager)",
        "expected_fix": "cuda_graphs",
        "compiled": True,
    },
    "v207": {
        "name": "null_kernel_fusion",
        "model": "OPT-style decoder LM (OPT-6.7B's width: vocab 50272, learned positions offset "
        "by 2; 2 pre-LayerNorm layers d 4096, one qkv projection with biases, 32 heads of 128, "
        "causal scaled_dot_product_attention, MLP 16384 with ReLU, no dropout; a final "
        "LayerNorm and the LM head tied to the token embedding; 617 M parameters) on 2 "
        "sequences of 2048 tokens, bf16 autocast, AdamW(fused=True): 15.4 TFLOP of bf16 "
        "matmuls a step, each elementwise op (LayerNorm, ReLU, residual add) alone between "
        "two of them, ~140 kernels: GPU-bound",
        "planted": "eager",
        "fix": "model.compile(): torch.compile(model) in place; the loss and the optimizer stay "
        "eager (gains ~0: the step is large matmuls, which Inductor leaves to cuBLAS as eager "
        "does; what it can fuse, a residual add into the next LayerNorm and its bf16 cast, is "
        "~1-2 % of the step)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
        "null": True,
    },
    "v208": {
        "name": "null_batch_size",
        "model": "DnCNN-style residual denoiser (DnCNN-S: 17 3x3 conv layers 64 ch, a conv "
        "1-64 with ReLU, 15 conv-BatchNorm-ReLU layers, a conv 64-1; the noise predicted and "
        "its MSE to the noise drawn, sigma 25/255) on 128x128 grey patches, bf16 autocast, "
        "channels_last, AdamW(fused=True): every kernel over 64 x 64 x 128 x 128 values (~67 "
        "M), the GPU full at batch 64, its 0.56 M parameters' optimizer step ~0.1 % of it",
        "planted": "batch 64",
        "fix": "batch 128 (2 x B, per-sample time; gains ~0: every kernel already fills the "
        "GPU, and the per-step costs a larger batch spreads, the launches and the optimizer "
        "over 0.56 M parameters, are ~0.5 % of the step)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 2,
        "null": True,
    },
}


def _rotate_half(torch, x, cos, sin):
    """Rotary embedding in the rotate-half form: ``x`` (..., t, hd) by ``cos`` and ``sin`` (t,
    hd), in their float32, cast back to ``x``'s dtype."""
    x1, x2 = x.chunk(2, -1)
    return (x * cos + torch.cat([-x2, x1], -1) * sin).type_as(x)


# ---------------------------------------------------------------- v201: ESM-2, checkpointed

_AMINO_FREQ = (9.66, 8.25, 7.07, 6.87, 6.56, 6.75, 5.53, 5.34, 5.96, 5.45)
_AMINO_FREQ += (4.70, 5.84, 3.93, 4.06, 3.86, 2.92, 2.42, 2.27, 1.08, 1.37)
"""UniProt's residue frequencies (%) in ESM's alphabet order, L A G V S E R T I D P K Q N F Y M
H W C (token ids 4-23)."""


def _esm2(k: Kit, fixed: bool, device: str, rank: int):
    # H200: 12 layers x 19.7 M weights x 6144 tokens x 6 = 8.7 TFLOP, the (bidirectional)
    # flash attention over 1024 tokens 1.2 and the head 0.06: 9.9 TFLOP a step (FlopCounter) of
    # bf16 matmuls at ~600-700 TFLOP/s, ~14-17 ms; the LayerNorms (fp32 out under autocast) and
    # their casts, the rotary on queries and keys (in fp32), GELU on 31 M values a layer, the
    # fp32 residual stream, the bias gradients and the weights' casts ~35 GB forward and
    # backward, ~9-10 ms; the fused AdamW over 238 M parameters ~6.7 GB, ~1.8 ms: ~25-29 ms
    # fixed against ~1,060 kernels (~11-27 ms of host): GPU-bound. Planted, each layer's
    # forward runs again in the backward, but for its last matmul (non-reentrant checkpointing
    # stops recomputing once the saved tensors are back): +2.3 TFLOP (FlopCounter: 12.2
    # planted), ~3.5 ms, +~12 GB of elementwise traffic, ~3 ms, and +~400 launches: ~31-35 ms,
    # ~17-22 % off when checkpointing goes. Memory: ~0.47 GB of saved activations a layer
    # fixed, ~5.7 GB, and 3.8 GB of parameters, gradients and AdamW's moments: ~10 GB of 141;
    # planted ~5 GB
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    d, heads, ff, layers, seq, batch = (
        (32, 4, 64, 2, 32, 2) if k.quick else (1280, 20, 5120, 12, 1024, 6)
    )
    vocab, cls_id, pad_id, eos_id, mask_id = 33, 0, 1, 2, 32
    hd = d // heads

    class Layer(nn.Module):  # ESM-2's: pre-LayerNorm, rotary on q and k, GELU MLP, biases
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            h = self.ln1(x)

            def split(y):
                return y.view(b, t, heads, hd).transpose(1, 2)

            q = _rotate_half(torch, split(self.q(h)), cos, sin)
            kk = _rotate_half(torch, split(self.k(h)), cos, sin)
            a = F.scaled_dot_product_attention(q, kk, split(self.v(h)))
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class ESM2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d, padding_idx=pad_id)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.ln_after = nn.LayerNorm(d)
            self.head_dense, self.head_ln = nn.Linear(d, d), nn.LayerNorm(d)
            self.head_bias = nn.Parameter(torch.zeros(vocab))
            inv = 1.0 / 10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
            ang = (torch.arange(seq, dtype=torch.float32)[:, None] * inv).repeat(1, 2)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, tokens):
            x = self.embed(tokens)
            # ESM-2's token dropout: the <mask> embeddings zeroed, the rest scaled by the
            # training mask share over the observed one
            masked = (tokens == mask_id).unsqueeze(-1)
            x = x.masked_fill(masked, 0.0)
            x = x * ((1 - 0.15 * 0.8) / (1 - masked.float().mean(1, keepdim=True)))
            for layer in self.layers:
                if fixed:
                    x = layer(x, self.cos, self.sin)
                else:
                    x = checkpoint(layer, x, self.cos, self.sin, use_reentrant=False)
            x = self.head_ln(F.gelu(self.head_dense(self.ln_after(x))))
            return F.linear(x, self.embed.weight) + self.head_bias

    model = ESM2().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(201)
    freq = torch.tensor(_AMINO_FREQ)
    residues = torch.multinomial(freq, batch * (seq - 2), True, generator=gen).view(batch, -1)
    target = torch.cat(
        [
            torch.full((batch, 1), cls_id),
            residues + 4,
            torch.full((batch, 1), eos_id),
        ],
        1,
    )
    # BERT-style masking of 15 % of the residues: 80 % <mask>, 10 % a random residue, 10 % kept
    pick = torch.rand(batch, seq, generator=gen) < 0.15
    pick[:, 0] = pick[:, -1] = False
    roll = torch.rand(batch, seq, generator=gen)
    tokens = torch.where(pick & (roll < 0.8), mask_id, target)
    rand_res = torch.randint(4, 24, (batch, seq), generator=gen)
    tokens = torch.where(pick & (roll >= 0.8) & (roll < 0.9), rand_res, tokens)
    labels = torch.where(pick, target, -100)
    tokens, labels = tokens.to(device), labels.view(-1).to(device)

    def loss_fn():
        with k.ac:
            logits = model(tokens)
        return F.cross_entropy(logits.float().view(-1, vocab), labels, ignore_index=-100)

    k.meta["checkpointed_modules"] = 0 if fixed else layers
    k.meta["precision"] = "bf16 autocast"
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v202: SAINT, AdamW's loop


def _saint(k: Kit, fixed: bool, device: str, rank: int):
    # H200: the intersample feed-forward on 256 rows of 2080 (Linear 2080-16640 and 8320-2080,
    # 52 M weights a layer) 26.6 GFLOP a layer forward, x 3 x 3 = 0.24 TFLOP, the rest ~0.02
    # (FlopCounter: 0.26), fp32 without TF32 at ~45-55 TFLOP/s: ~5 ms; the 60 per-feature
    # MLPs' ~300 kernels forward and backward, the column attention over 16,640 tokens of 32
    # and the intersample one (~2 GB in all), ~2 ms: ~850 kernels of fused AdamW's few and the
    # forward and backward (the aten ops of a step, the attention's as one kernel each way),
    # ~8.5-21 ms of host against ~7-8 ms of GPU: host-bound, ~10-22 ms fixed (the fused AdamW
    # over 159 M parameters, ~4.5 GB, ~1.2 ms of GPU beside it). Planted, AdamW's
    # single-tensor loop: ~9 kernels and ~65-95 us of host per tensor (v133 and v161 recorded
    # ~85-95) over 311 tensors, ~20-30 ms more of host (its ~11 GB of GPU traffic, ~3 ms,
    # hidden under it): ~30-50 ms, ~50-60 % off
    torch, nn, F = k.torch, k.nn, k.F
    n_cont, cards, d, depth, heads, dim_head, hidden, batch = (
        (4, (3, 5), 8, 1, 2, 4, 10, 8) if k.quick else (60, (3, 7, 12, 24), 32, 3, 8, 16, 100, 256)
    )
    n = 1 + len(cards) + n_cont  # the CLS column first, as a one-value categorical column
    classes, drop = 2, 0.1

    class Attention(nn.Module):  # SAINT's: qkv without bias, an output Linear, dropout 0.1
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.qkv = nn.Linear(dim, 3 * heads * dim_head, bias=False)
            self.out = nn.Linear(heads * dim_head, dim)

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(x).view(b, t, 3, heads, dim_head).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v, dropout_p=drop)
            return self.out(a.transpose(1, 2).reshape(b, t, heads * dim_head))

    class GEGLU(nn.Module):  # SAINT's feed-forward: Linear to 2 x 4 x dim, GEGLU, Linear back
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(dim, 8 * dim), nn.Linear(4 * dim, dim)

        def forward(self, x):
            a, g = self.fc1(x).chunk(2, -1)
            return self.fc2(F.dropout(a * F.gelu(g), drop))

    class Layer(nn.Module):  # SAINT's 'colrow': attention across the columns, then the rows
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.col = nn.LayerNorm(d), Attention(d)
            self.n2, self.ff1 = nn.LayerNorm(d), GEGLU(d)
            self.n3, self.row = nn.LayerNorm(n * d), Attention(n * d)
            self.n4, self.ff2 = nn.LayerNorm(n * d), GEGLU(n * d)

        def forward(self, x):
            x = x + self.col(self.n1(x))
            x = x + self.ff1(self.n2(x))
            r = x.reshape(1, x.shape[0], n * d)  # the batch's rows as one sequence
            r = r + self.row(self.n3(r))
            r = r + self.ff2(self.n4(r))
            return r.view_as(x)

    class SAINT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            sizes = (1, *cards)
            self.embeds = nn.Embedding(sum(sizes), d)
            offsets = torch.tensor([0, *sizes[:-1]]).cumsum(0)
            self.register_buffer("offsets", offsets, persistent=False)
            self.cont = nn.ModuleList(
                nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, d))
                for _ in range(n_cont)
            )
            self.layers = nn.ModuleList(Layer() for _ in range(depth))
            self.head = nn.Sequential(nn.Linear(d, 1000), nn.ReLU(), nn.Linear(1000, classes))

        def forward(self, x_cat, x_cont):
            e_cat = self.embeds(x_cat + self.offsets)
            e_cont = torch.stack([mlp(x_cont[:, j : j + 1]) for j, mlp in enumerate(self.cont)], 1)
            x = torch.cat([e_cat, e_cont], 1)
            for layer in self.layers:
                x = layer(x)
            return self.head(x[:, 0])

    model = SAINT().to(device)
    opt = k.adamw(model, fused=True) if fixed else k.adamw(model, foreach=False)
    gen = torch.Generator().manual_seed(202)
    # numeric features of a few correlated factors, categorical ones drawn per column, a label
    # that is a noisy threshold of both
    factors = torch.randn(batch, 8, generator=gen)
    x_cont = factors @ torch.randn(8, n_cont, generator=gen) / 3 + 0.5 * torch.randn(
        batch, n_cont, generator=gen
    )
    x_cat = torch.stack([torch.zeros(batch, dtype=torch.long)] + [
        torch.randint(0, c, (batch,), generator=gen) for c in cards
    ], 1)  # fmt: skip
    score = x_cont[:, :8].sum(1) + (x_cat[:, 1] == 0).float() + torch.randn(batch, generator=gen)
    y = (score > 0).long()
    x_cat, x_cont, y = x_cat.to(device), x_cont.to(device), y.to(device)

    def loss_fn():
        return F.cross_entropy(model(x_cat, x_cont), y)

    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["optimizer"] = "AdamW(fused=True)" if fixed else "AdamW(foreach=False)"
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v203: ENet, cuDNN benchmark


def _enet(k: Kit, fixed: bool, device: str, rank: int):
    # H200: 4.1 GMAC an image (FlopCounter at 512x1024), x 12 x 2 x 3 = 0.30 TFLOP a step of
    # fp32 convolutions with cuDNN TF32 over 4-128 channels (most of them 16-32 wide: ~10-30 %
    # of the TF32 peak, and memory-bound), ~5-10 ms under the heuristics' picks; BatchNorm,
    # PReLU, the spatial dropout, the residual adds, the pools and unpools over tensors of 12-100
    # M fp32 values (the 19 logits at 512x1024 and the loss ~0.5 GB each): ~60 GB forward and
    # backward, ~16-17 ms; ~900 kernels (the aten ops of a step; ~9-23 ms of host): GPU-bound,
    # ~22-28 ms. cudnn.benchmark times every algorithm for each of the ~40 distinct shapes (the
    # 2x2 stride-2 projections, the dilations 2-16 at 64x128, the 5x1 and 1x5, the stride-2 3x3
    # transposed convs; forward, data and weight gradients) at the first step, then uses the
    # fastest: ~5-15 % off, where the heuristics miss on the narrow, dilated and asymmetric ones
    torch, nn, F = k.torch, k.nn, k.F
    h, w, c1, c2, classes, batch = (
        (32, 64, 16, 32, 4, 2) if k.quick else (512, 1024, 64, 128, 19, 12)
    )
    batch *= k.batch_scale  # 1, but 4 under the batch_size first fix (record_blind14.FIRST_FIXES)
    k.torch.backends.cudnn.benchmark = fixed

    class Initial(nn.Module):  # a strided 3x3 conv 3-13 beside a 3x3 max pool: 16 ch at 1/2
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 13, 3, 2, 1, bias=False)
            self.bn, self.act = nn.BatchNorm2d(16), nn.PReLU(16)

        def forward(self, x):
            return self.act(self.bn(torch.cat([self.conv(x), F.max_pool2d(x, 3, 2, 1)], 1)))

    def cba(conv: Any, c: int, relu: bool) -> list:
        return [conv, nn.BatchNorm2d(c), nn.ReLU() if relu else nn.PReLU(c)]

    class Bottleneck(nn.Module):
        """ENet's: a 1x1 projection to ci/4 (2x2 stride 2 when ``down``), the main conv
        (``kind``: "regular", "dilated" with ``dil``, "asym" 5x1 then 1x5, "up" a 3x3 stride-2
        transposed conv), a 1x1 expansion to ``co``, spatial dropout ``p``; the shortcut
        max-pooled and zero-padded when ``down``, a 1x1 conv and max-unpooled when "up";
        PReLU in the encoder, ReLU in the decoder (``relu``, and every "up")."""

        def __init__(self, ci: int, co: int, kind: str = "regular", dil: int = 1,
                     down: bool = False, p: float = 0.1, relu: bool = False) -> None:  # fmt: skip
            super().__init__()
            r, relu = ci // 4, relu or kind == "up"
            self.down, self.up, self.co = down, kind == "up", co
            first = nn.Conv2d(ci, r, 2, 2, bias=False) if down else nn.Conv2d(ci, r, 1, bias=False)
            if kind == "asym":
                main = [
                    *cba(nn.Conv2d(r, r, (5, 1), padding=(2, 0), bias=False), r, relu),
                    *cba(nn.Conv2d(r, r, (1, 5), padding=(0, 2), bias=False), r, relu),
                ]
            elif kind == "up":
                main = cba(nn.ConvTranspose2d(r, r, 3, 2, 1, output_padding=1, bias=False), r, relu)
            else:
                main = cba(nn.Conv2d(r, r, 3, padding=dil, dilation=dil, bias=False), r, relu)
            self.ext = nn.Sequential(
                *cba(first, r, relu), *main, nn.Conv2d(r, co, 1, bias=False), nn.BatchNorm2d(co),
                nn.Dropout2d(p),
            )  # fmt: skip
            if self.up:
                self.short = nn.Sequential(nn.Conv2d(ci, co, 1, bias=False), nn.BatchNorm2d(co))
            self.act = nn.ReLU() if relu else nn.PReLU(co)

        def forward(self, x, indices=None):
            ext = self.ext(x)
            if self.down:
                main, indices = F.max_pool2d(x, 2, 2, return_indices=True)
                main = F.pad(main, (0, 0, 0, 0, 0, self.co - x.shape[1]))
                return self.act(main + ext), indices
            if self.up:
                main = F.max_unpool2d(self.short(x), indices, 2, 2, output_size=ext.shape[-2:])
                return self.act(main + ext)
            return self.act(x + ext)

    def stage(c: int) -> list:  # ENet's 2.1-2.8 and 3.1-3.8
        return [
            Bottleneck(c, c), Bottleneck(c, c, "dilated", 2), Bottleneck(c, c, "asym"),
            Bottleneck(c, c, "dilated", 4), Bottleneck(c, c), Bottleneck(c, c, "dilated", 8),
            Bottleneck(c, c, "asym"), Bottleneck(c, c, "dilated", 16),
        ]  # fmt: skip

    class ENet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.initial = Initial()
            self.down1 = Bottleneck(16, c1, down=True, p=0.01)
            self.stage1 = nn.Sequential(*(Bottleneck(c1, c1, p=0.01) for _ in range(4)))
            self.down2 = Bottleneck(c1, c2, down=True)
            self.stage2 = nn.Sequential(*stage(c2))  # 2.1-2.8, after the downsampling 2.0
            self.stage3 = nn.Sequential(*stage(c2))
            self.up4 = Bottleneck(c2, c1, "up")
            self.stage4 = nn.Sequential(*(Bottleneck(c1, c1, relu=True) for _ in range(2)))
            self.up5 = Bottleneck(c1, 16, "up")
            self.stage5 = Bottleneck(16, 16, relu=True)
            self.out = nn.ConvTranspose2d(16, classes, 3, 2, 1, output_padding=1, bias=False)

        def forward(self, x):
            x = self.initial(x)
            x, i1 = self.down1(x)
            x = self.stage1(x)
            x, i2 = self.down2(x)
            x = self.stage3(self.stage2(x))
            x = self.stage4(self.up4(x, i2))
            x = self.stage5(self.up5(x, i1))
            return self.out(x)

    model = ENet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(203)
    # street-scene-like labels: a smooth random field's argmax over the classes, the image
    # each class's colour, shaded and noisy
    field = F.interpolate(torch.randn(batch, classes, h // 32, w // 32, generator=gen),
                          size=(h, w), mode="bilinear", align_corners=False)  # fmt: skip
    y = field.argmax(1)
    colours = torch.rand(classes, 3, generator=gen)
    x = colours[y].permute(0, 3, 1, 2) * (0.7 + 0.3 * field.amax(1, keepdim=True).tanh())
    x = (x + 0.05 * torch.randn(batch, 3, h, w, generator=gen) - 0.5) / 0.25
    x, y = x.to(device), y.to(device)

    def loss_fn():
        return F.cross_entropy(model(x), y)

    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["precision"] = FP32_TF32
    kinds = {"Conv2d": nn.Conv2d, "ConvTranspose2d": nn.ConvTranspose2d}
    k.meta["conv_layers"] = {
        n: sum(type(m) is t for m in model.modules()) for n, t in kinds.items()
    }
    k.meta["conv_kernels"] = sorted(
        {"x".join(map(str, m.kernel_size)) for m in model.modules() if isinstance(m, nn.Conv2d)}
    )
    k.meta["dilations"] = sorted(
        {m.dilation[0] for m in model.modules() if isinstance(m, nn.Conv2d)}
    )
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v204: EGNN, per-layer syncs


def _molecules(torch, gen: Any, batch: int, atoms: int, smallest: int) -> tuple:
    """QM9-like molecules, padded to ``atoms``: (atom types one-hot (b, atoms, 5), positions (b,
    atoms, 3) in Angstrom, centred, node mask (b, atoms, 1), edge mask (b, atoms, atoms, 1)
    without self-pairs, a regression target (b,) standardised). Each molecule has
    ``smallest``-``atoms`` atoms, about half hydrogens, placed by a random walk of 1.1-1.5 A
    steps."""
    counts = torch.randint(smallest, atoms + 1, (batch,), generator=gen)
    nmask = (torch.arange(atoms)[None, :] < counts[:, None]).float()[..., None]
    types = torch.multinomial(torch.tensor([0.5, 0.35, 0.06, 0.08, 0.01]), batch * atoms, True,
                              generator=gen).view(batch, atoms)  # fmt: skip
    onehot = torch.nn.functional.one_hot(types, 5).float() * nmask
    steps = torch.randn(batch, atoms, 3, generator=gen)
    length = 1.1 + 0.4 * torch.rand(batch, atoms, 1, generator=gen)
    steps = steps / steps.norm(dim=-1, keepdim=True) * length
    pos = steps.cumsum(1) * nmask
    pos = (pos - pos.sum(1, keepdim=True) / nmask.sum(1, keepdim=True)) * nmask
    emask = nmask[:, :, None] * nmask[:, None, :] * (1 - torch.eye(atoms))[None, :, :, None]
    dist = (pos[:, :, None] - pos[:, None]).norm(dim=-1, keepdim=True)
    weight = torch.tensor([0.2, 1.0, 1.3, 1.5, 1.7])[types][..., None]  # an energy-like sum
    target = ((weight[:, :, None] * weight[:, None] * torch.exp(-dist)) * emask).sum((1, 2, 3))
    return onehot, pos, nmask, emask, (target - target.mean()) / target.std()


def _egnn(k: Kit, fixed: bool, device: str, rank: int):
    # H200, fp32 without TF32: per layer the edge MLP's matmuls on 107,648 pairs (257-128 and
    # 128-128), the gate's and the coordinate MLP's 128-128: 5.5 GMAC forward, x 7 x 6 = 0.23
    # TFLOP, 0.30 with the node MLPs (FlopCounter), at ~45-55 TFLOP/s, ~6 ms; the pairs'
    # elementwise chains (the differences, distances, the concatenation of 257 values a pair,
    # SiLUs, the gate, the coordinate update and the sums, 55-110 MB each) ~17 GB forward and
    # backward, ~4.5-5 ms: ~10-12 ms of GPU in ~650 kernels of ~2-100 us (the aten ops of a
    # step, each layer's gradient norm by one foreach norm) against ~6.5-16 ms of host: GPU-
    # bound or near it. Planted, each of the 14 forward syncs drains the queue, and the next
    # layer's first kernels (the differences and distances, ~5 us each) start only as the host
    # launches them; the 7 after the backward each wait on a norm of the layer's ~14 gradients;
    # and the host can no longer run ahead into the next layer or step: ~21 x 60-120 us and the
    # lost overlap, ~2-3 ms: ~12-18 ms planted, ~15-20 % off
    torch, nn, F = k.torch, k.nn, k.F
    atoms, smallest, d, layers, batch = (6, 3, 16, 2, 4) if k.quick else (29, 10, 128, 7, 128)

    class EGCL(nn.Module):  # EGNN's equivariant layer (egnn_clean), dense over the pairs
        def __init__(self) -> None:
            super().__init__()
            self.edge = nn.Sequential(
                nn.Linear(2 * d + 1, d), nn.SiLU(), nn.Linear(d, d), nn.SiLU()
            )
            self.att = nn.Linear(d, 1)
            self.coord = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, 1, bias=False))
            nn.init.xavier_uniform_(self.coord[2].weight, gain=0.001)
            self.node = nn.Sequential(nn.Linear(2 * d, d), nn.SiLU(), nn.Linear(d, d))

        def forward(self, h, x, emask, nmask):
            b, n, _ = h.shape
            rel = x[:, :, None] - x[:, None]
            d2 = rel.pow(2).sum(-1, keepdim=True)
            pair = torch.cat(
                [h[:, :, None].expand(b, n, n, d), h[:, None].expand(b, n, n, d), d2], -1
            )
            m = self.edge(pair)
            m = m * torch.sigmoid(self.att(m)) * emask
            unit = rel / (d2.sqrt().detach() + 1.0)  # egnn_clean's normalised differences
            shift = (unit * self.coord(m)).sum(2) / (n - 1) * nmask
            h = (h + self.node(torch.cat([h, m.sum(2)], -1))) * nmask
            return h, x + shift, shift, m

    class EGNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(5, d)
            self.layers = nn.ModuleList(EGCL() for _ in range(layers))
            self.node_dec = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
            self.graph_dec = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, 1))

        def forward(self, z, x, emask, nmask, log):
            h = self.embed(z) * nmask
            for layer in self.layers:
                h, x, shift, m = layer(h, x, emask, nmask)
                log(shift, m)
            return self.graph_dec((self.node_dec(h) * nmask).sum(1)).squeeze(-1)

    model = EGNN().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(204)
    mols = _molecules(torch, gen, batch, atoms, smallest)
    pairs = float(mols[3].sum())  # the real pairs, counted once on the host
    z, pos, nmask, emask, target = (t.to(device) for t in mols)
    seen: list[float] = []
    log_sum = torch.zeros(3 * layers, device=device)

    def step() -> None:
        vals: list = []

        def log(shift, m) -> None:  # the layer's largest coordinate shift, mean message norm
            vals.append(shift.detach().norm(dim=-1).amax())
            vals.append((m.detach().norm(dim=-1, keepdim=True) * emask).sum() / pairs)
            if not fixed:
                seen.extend(v.item() for v in vals[-2:])

        loss = F.l1_loss(model(z, pos, emask, nmask, log), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for layer in model.layers:  # each layer's gradient norm (the last one's coordinate
            grads = [p.grad for p in layer.parameters() if p.grad is not None]  # MLP has none)
            vals.append(torch.nn.utils.get_total_norm(grads))
            if not fixed:
                seen.append(vals[-1].item())
        opt.step()
        if fixed:  # the same values kept on the GPU
            log_sum.add_(torch.stack(vals))

    k.meta["syncs_per_step"] = 0 if fixed else 3 * layers
    return step, batch, model


# ---------------------------------------------------------------- v205: DPN-68, fp32 vs bf16


def _dpn(k: Kit, fixed: bool, device: str, rank: int):
    # What bf16 adds beyond TF32: the planted convolutions already run on TF32 tensor cores.
    # H200: 2.33 GMAC an image forward (FlopCounter; it counts the grouped convs' backward as
    # if ungrouped, 3.2 TFLOP a step), x 96 x 2 x 3 = 1.34 TFLOP a step of convolutions: fp32
    # with cuDNN TF32 (grouped 3x3s of 4-32 channels a group and 1x1s, ~60-120 TFLOP/s), ~11-22
    # ms; the pre-activation BatchNorm and ReLU before every conv and the dense path's
    # concatenations (each block copies the growing dense path) ~63 GB fp32 forward and
    # backward, ~17 ms; the fused AdamW over 12.6 M parameters ~0.1 ms: ~30-40 ms planted
    # against ~710 kernels (the aten ops of a step; ~7-18 ms of host). bf16 autocast: the convs
    # on bf16 tensor cores (~2 x TF32's rate, in NCHW with cuDNN's own layout changes), ~6-11
    # ms, the BatchNorm, ReLU and concatenation traffic halved, ~9 ms, the 72 weights' casts and
    # their gradients' back: ~16-22 ms against ~860 kernels (~9-22 ms of host), ~35-45 % off
    torch, nn, F = k.torch, k.nn, k.F
    img, init, k_r, groups, k_sec, inc_sec, bws, classes, batch = (
        (32, 8, 32, 4, (1, 2, 1, 1), (4, 4, 4, 4), (16, 16, 32, 32), 10, 4)
        if k.quick
        else (224, 10, 128, 32, (3, 4, 12, 3), (16, 32, 32, 64), (64, 128, 256, 512), 1000, 96)
    )

    class BnActConv(nn.Module):  # DPN's pre-activation unit: BatchNorm, ReLU, conv
        def __init__(self, ci: int, co: int, ks: int, s: int = 1, g: int = 1) -> None:
            super().__init__()
            self.bn = nn.BatchNorm2d(ci, eps=0.001)
            self.conv = nn.Conv2d(ci, co, ks, s, ks // 2, groups=g, bias=False)

        def forward(self, x):
            return self.conv(F.relu(self.bn(x)))

    class DualPath(nn.Module):
        def __init__(self, ci: int, r: int, bw: int, inc: int, kind: str) -> None:
            super().__init__()
            self.bw, s = bw, 2 if kind == "down" else 1
            self.proj = BnActConv(ci, bw + 2 * inc, 1, s) if kind != "normal" else None
            self.a = BnActConv(ci, r, 1)
            self.b = BnActConv(r, r, 3, s, groups)
            self.c = BnActConv(r, bw + inc, 1)

        def forward(self, x):
            x_in = torch.cat(x, 1) if isinstance(x, tuple) else x
            if self.proj is not None:
                x_s = self.proj(x_in)
                res, dense = x_s[:, : self.bw], x_s[:, self.bw :]
            else:
                res, dense = x
            y = self.c(self.b(self.a(x_in)))
            return res + y[:, : self.bw], torch.cat([dense, y[:, self.bw :]], 1)

    class DPN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, init, 3, 2, 1, bias=False), nn.BatchNorm2d(init, eps=0.001),
                nn.ReLU(), nn.MaxPool2d(3, 2, 1),
            )  # fmt: skip
            blocks, ci = [], init
            for i, (n_blocks, inc, bw) in enumerate(zip(k_sec, inc_sec, bws, strict=True)):
                r = k_r * bw // 64
                blocks.append(DualPath(ci, r, bw, inc, "proj" if i == 0 else "down"))
                ci = bw + 3 * inc
                for _ in range(n_blocks - 1):
                    blocks.append(DualPath(ci, r, bw, inc, "normal"))
                    ci += inc
            self.blocks = nn.Sequential(*blocks)
            self.bn = nn.BatchNorm2d(ci, eps=0.001)
            self.fc = nn.Conv2d(ci, classes, 1)

        def forward(self, x):
            x = F.relu(self.bn(torch.cat(self.blocks(self.stem(x)), 1)))
            return self.fc(F.adaptive_avg_pool2d(x, 1)).flatten(1)

    model = DPN().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(205)
    # natural-image-like inputs: smooth colour fields with some texture, normalised
    x = F.interpolate(torch.randn(batch, 3, img // 16, img // 16, generator=gen), size=(img, img),
                      mode="bicubic", align_corners=False)  # fmt: skip
    x = (x + 0.3 * torch.randn(batch, 3, img, img, generator=gen)).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)
    k.meta["precision"] = f"bf16 autocast, {FP32_TF32}" if fixed else FP32_TF32
    k.meta["memory_format"] = "NCHW" if x.is_contiguous() else "other"
    k.meta["grouped_convs"] = sum(
        isinstance(m, nn.Conv2d) and m.groups > 1 for m in model.modules()
    )
    return k.train(opt, precision_loss(k, fixed, model, F.cross_entropy, x, y)), batch, model


# ---------------------------------------------------------------- v206: Decision Transformer


def _decision_transformer(k: Kit, fixed: bool, device: str, rank: int):
    # H200: 64 windows x 60 tokens = 3,840 rows of 128: each matmul 0.06-0.25 GMAC (fp32
    # without TF32, ~5-15 us; 0.04 TFLOP a step, FlopCounter), each elementwise kernel 0.5-2 M
    # values (~2-4 us; ~1.5 GB a step); 8 blocks of ~11 kernels forward and ~25 backward, the
    # embeddings, the action head, the loss and the fused AdamW (109 tensors, ~3 launches):
    # ~350 kernels a step (the aten ops of a step, the attention's as one kernel each way),
    # ~1.5-2 ms of GPU against ~3.5-9 ms of host: launch-bound, the GPU idle most of the step.
    # reduce-overhead replays the forward and the backward as two CUDA graphs (their inputs
    # copied in; the loss and AdamW eager, ~15 launches): ~2-2.5 ms, ~45-75 % off. Inductor
    # compiles the 8 blocks (~450 aten ops forward and backward) in ~20-40 s cold, once,
    # cached after
    torch, nn, F = k.torch, k.nn, k.F
    state_dim, act_dim, ctx, d, depth, heads, batch, max_ep = (
        (5, 2, 4, 16, 2, 2, 4, 64) if k.quick else (17, 6, 20, 128, 8, 4, 64, 1000)
    )

    class Block(nn.Module):  # GPT-2's: pre-LayerNorm, causal attention, tanh-GELU MLP
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.attn(self.ln1(x)).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class DecisionTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_t = nn.Embedding(max_ep, d)
            self.embed_r, self.embed_s = nn.Linear(1, d), nn.Linear(state_dim, d)
            self.embed_a, self.embed_ln = nn.Linear(act_dim, d), nn.LayerNorm(d)
            self.blocks = nn.ModuleList(Block() for _ in range(depth))
            self.ln_f = nn.LayerNorm(d)
            self.predict_a = nn.Linear(d, act_dim)

        def forward(self, rtg, states, actions, timesteps):
            b, t = states.shape[:2]
            e = self.embed_t(timesteps)
            toks = [self.embed_r(rtg) + e, self.embed_s(states) + e, self.embed_a(actions) + e]
            x = self.embed_ln(torch.stack(toks, 2).reshape(b, 3 * t, d))  # R1 s1 a1 R2 s2 ...
            for blk in self.blocks:
                x = blk(x)
            x = self.ln_f(x).view(b, t, 3, d)
            return torch.tanh(self.predict_a(x[:, :, 1]))  # each action from its state's token

    model = DecisionTransformer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    mode = "reduce-overhead"
    if fixed:
        k.meta["compile_how"] = compile_in_place(model, mode=mode)
    gen = torch.Generator().manual_seed(206)
    # trajectory windows of a smooth random policy: states an AR(1) process, actions a tanh of
    # a fixed linear map of them, rewards from both, returns-to-go summed back over 1000 steps
    start = torch.randint(0, max_ep - ctx, (batch,), generator=gen)
    timesteps = start[:, None] + torch.arange(ctx)
    states = torch.randn(batch, ctx, state_dim, generator=gen).cumsum(1) * 0.3
    actions = torch.tanh(states @ torch.randn(state_dim, act_dim, generator=gen) * 0.5)
    reward = actions.pow(2).sum(-1).neg() + states[..., 0]
    rtg = (reward.flip(1).cumsum(1).flip(1) + (max_ep - ctx - start)[:, None] * 0.5)[..., None]
    rtg, states, actions, timesteps = (
        t.to(device) for t in (rtg / 1000, states, actions, timesteps)
    )

    def loss_fn():
        return F.mse_loss(model(rtg, states, actions, timesteps), actions)

    k.meta["compiled"] = fixed
    k.meta["compile_mode"] = mode if fixed else "eager"
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v207: OPT, compiled (null)


def _opt(k: Kit, fixed: bool, device: str, rank: int):
    # H200: 2 layers x 201 M weights x 4096 tokens x 6 = 9.9 TFLOP, the tied head (4096 x
    # 50272) 5.1, causal flash attention over 2048 tokens 0.4: 15.4 TFLOP a step (FlopCounter:
    # 15.8, the attention counted as if not causal) of bf16 matmuls at ~600-700 TFLOP/s, ~22-26
    # ms; the fused AdamW over 617 M parameters ~17 GB, ~4.5 ms; the weights' bf16 casts and
    # their gradients' back ~7.4 GB, ~2 ms; the fp32 logits and cross-entropy over 4096 x 50272
    # ~6 GB, ~1.5 ms: ~31-35 ms eager both, ~140 kernels (the aten ops of a step and autocast's
    # casts), GPU-bound. What Inductor can fuse is the layers' elementwise ops (T d = 16.8 M):
    # ~64 T d bytes a layer forward eager (LayerNorms with fp32 outputs and their bf16 casts,
    # ReLU over 4096 x 16384, two residual adds) and ~110 backward (the residual gradients'
    # adds, the casts back, the LayerNorms' and ReLU's backward, the bias gradients' sums);
    # compiled, a residual add, the next LayerNorm and its cast are one kernel each way, and the
    # bias sums join their producers, ~70 T d a layer fewer (ReLU stays its own, between two
    # matmuls it cannot enter): ~2.3 GB a step, ~0.6 ms of ~33: ~1-2 %, within the rounds'
    # scatter
    torch, nn, F = k.torch, k.nn, k.F
    vocab, d, heads, ff, layers, seq, batch = (
        (256, 32, 4, 128, 2, 32, 2) if k.quick else (50272, 4096, 32, 16384, 2, 2048, 2)
    )

    class Layer(nn.Module):  # OPT's pre-LayerNorm layer, biases throughout, ReLU MLP
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
            x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.relu(self.fc1(self.ln2(x))))

    class OPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d, padding_idx=1)
            self.pos = nn.Embedding(seq + 2, d)  # OPT's learned positions, offset by 2
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)

        def forward(self, ids):
            x = self.tok(ids) + self.pos(torch.arange(2, ids.shape[1] + 2, device=ids.device))
            for layer in self.layers:
                x = layer(x)
            return F.linear(self.ln_f(x), self.tok.weight)

    with torch.device(device):  # 617 M parameters made where they train
        model = OPT()
    opt = k.adamw(model, fused=k.cuda)
    if fixed:
        k.meta["compile_how"] = compile_in_place(model)
    gen = torch.Generator().manual_seed(207)
    data = torch.multinomial(
        torch.arange(1, vocab + 1, dtype=torch.float32) ** -1.1, batch * (seq + 1), True,
        generator=gen,
    ).view(batch, seq + 1)  # fmt: skip
    ids, nxt = data[:, :-1].to(device), data[:, 1:].to(device)

    def loss_fn():
        with k.ac:
            logits = model(ids)
        return F.cross_entropy(logits.float().view(-1, vocab), nxt.reshape(-1))

    k.meta["compiled"] = fixed
    k.meta["precision"] = "bf16 autocast"
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v208: DnCNN, 2 x batch (null)


def _dncnn(k: Kit, fixed: bool, device: str, rank: int):
    # H200, bf16 channels_last: each of the 15 inner 3x3 convs 64-64 over 64 x 128 x 128
    # pixels 38.7 GMAC forward, x 6 = 0.23 TFLOP; 3.5 TFLOP a step in all (FlopCounter), at
    # ~250-400 TFLOP/s (64-channel convs), ~9-14 ms; BatchNorm and ReLU over 67 M bf16 values a
    # layer (134 MB), ~21 GB forward and backward, ~5.5-6 ms; the noise drawn and the loss ~0.3
    # ms: ~15-20 ms of GPU at batch 64 against ~170 kernels of 20-500 us each (the aten ops of
    # a step and autocast's casts; ~2-4 ms of host), GPU-bound. At 2 x B every kernel is twice
    # as long and the step twice as long, ~30-40 ms for twice the samples; what a larger batch
    # spreads, the launches' gaps and the fused AdamW over 0.56 M parameters (~10 us), is ~0.5
    # % of the step: ~0-1 % off per sample
    torch, nn, F = k.torch, k.nn, k.F
    depth, ch, size, base = (5, 8, 16, 2) if k.quick else (17, 64, 128, 64)
    batch = base * (2 if fixed else 1)
    sigma = 25 / 255

    class DnCNN(nn.Module):  # DnCNN-S: conv-ReLU, (depth - 2) x conv-BN-ReLU, conv
        def __init__(self) -> None:
            super().__init__()
            body: list = [nn.Conv2d(1, ch, 3, padding=1), nn.ReLU()]
            for _ in range(depth - 2):
                body += [nn.Conv2d(ch, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch), nn.ReLU()]
            self.body = nn.Sequential(*body, nn.Conv2d(ch, 1, 3, padding=1))

        def forward(self, noisy):
            return self.body(noisy)  # the residual: the noise, not the clean patch

    model = DnCNN().to(device, memory_format=torch.channels_last)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(208)
    # grey natural-image-like patches: smooth fields with edges, in [0, 1]; both variants draw
    # the same pool, the first `batch` used
    pool = F.interpolate(torch.randn(2 * base, 1, size // 8, size // 8, generator=gen),
                         size=(size, size), mode="bicubic", align_corners=False)  # fmt: skip
    pool = torch.sigmoid(2 * pool + (pool > 0.5).float())
    clean = pool[:batch].to(device).contiguous(memory_format=torch.channels_last)

    def loss_fn():
        noise = torch.randn_like(clean) * sigma
        with k.ac:
            residual = model(clean + noise)
        return F.mse_loss(residual.float(), noise, reduction="sum") / (2 * batch)

    k.meta["batch_multiple"] = 2
    k.meta["memory_format"] = "channels_last"
    k.meta["precision"] = "bf16 autocast"
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v201": _esm2,
    "v202": _saint,
    "v203": _enet,
    "v204": _egnn,
    "v205": _dpn,
    "v206": _decision_transformer,
    "v207": _opt,
    "v208": _dncnn,
}
