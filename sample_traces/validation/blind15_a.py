"""The fifteenth blind part's cases v209-v214 (merged by record_blind15.py): six 2-GPU pairs under
torchrun, each on a model family no earlier case used. An uneven batch split under DDP, rank 1
given 1.5 x rank 0's images of a ResNeSt-style CNN (v209); rank 0 alone computing its training
metric in Python after each step (token accuracy and seqeval-style entity F1 over ~12 k tokens) for
a LayoutLM-style form labeller (v210); activation checkpointing on every block of an MPT-style
decoder under FSDP2 that leaves most of the GPU's memory free (v211); DDP's gradients held in one
4 GB bucket until the backward ends on a Marian-style translation transformer of 209 M parameters
and short sentences (v212); FSDP2's all-gathers serialized behind the compute of a StableLM-style
decoder of 617 M parameters on short sequences (v213); and a pair chosen to gain nothing: 4
DataLoader workers per rank where each batch is a slice and a stack of a pre-made tensor, beside a
GPU-bound MobileViT-style step (v214).

v213, how the prefetch is defeated (analysis/fixes/fsdp_prefetch.py tells the user, for FSDP2,
``set_modules_to_forward_prefetch([next])`` and ``set_modules_to_backward_prefetch([prev])`` over
the layers; v185 and v186 defeated it with record_multi_gpu.defeat_prefetch's stream gates, which
no user writes, and were fixed by removing them). Here both variants call FSDP2's
``FSDPModule._set_unshard_async_op(True)``, which users set to make the all-gather buffers in the
compute stream (no memory fragmented across FSDP2's copy-in and all-gather streams; pytorch issue
147168) and which FSDP2 documents as needing explicit prefetching to keep any overlap: each unshard
then runs its copy-in on the compute stream and its all-gather on NCCL's stream behind it, so
without explicit prefetching every layer's forward all-gather is issued in its own pre-forward and
waited on at once, behind the compute before it (the backward keeps FSDP2's default prefetch of
one layer, issued from each layer's pre-backward, in both variants). The planted variant stops
there; the fixed one adds gpuscope's code as it reads, so each layer's forward all-gather is issued
while the layer before computes. The model is sized for the all-gathers to matter: 51 M parameters
a layer (100 MB in bf16) against 1024 tokens per rank, so a layer's forward compute is about as
long as its all-gather, which the fix can then hide whole.

v214 is v83's question (four workers beside a slice and a stack, one GPU: -0.6 %) under torchrun
on 2 GPUs, where each rank starts its own workers.

Each builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model); planted and fixed
build the same model from the same seed and differ only in the planted thing (v209: the batch per
rank; the job's 40 images a step the same in both). Sizes come from FLOP, byte and launch counts
over one step at full size on the meta device (FLOPs from torch's FlopCounterMode; bytes from the
inputs and outputs of each aten op but the matmuls, convolutions and attention, in fp32, about
halved under bf16; attention counted as one flash or memory-efficient kernel each way): nothing
here ran on a GPU before the part was fixed. Each builder's comment gives its estimate of one step
on an H200 (bf16 matmuls at ~550-600 TFLOP/s, convolutions at ~200, memory at ~3.5 TB/s, NCCL
over NVLink at ~360 GB/s a direction, ~10 us of host an eager launch); the 2-GPU cases recorded
before ran ~1.5-2.5 x their estimates (v185 ~21 ms estimated, 66 timed; v188 ~18-20, 42; v189
~60-90, 102), so each estimate is aimed at 15-30 ms.
"""

from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, PremadeImages, uint8_batches  # noqa: E402

CASES: dict[str, dict] = {
    "v209": {
        "name": "load_imbalance_batch",
        "model": "ResNeSt-style CNN (ResNeSt-50's layout: a deep stem of three 3x3 convs 32/32/64 "
        "ch and a max pool; 3/4/6/3 bottleneck blocks of widths 64-512 whose 3x3 conv is a "
        "split-attention conv of radix 2 (a 2-group conv, the splits summed, pooled, a 1x1 conv "
        "bottleneck with BatchNorm and ReLU, an r-softmax over the splits weighting them), a 3x3 "
        "average pool after it where a block downsamples, average-pool-then-1x1-conv shortcuts; "
        "global pool, 1000 classes; 27.5 M parameters) on 384 x 384 images under DDP on 2 "
        "GPUs, bf16 autocast, channels_last, AdamW(fused=True): the step's time grows with the "
        "images",
        "planted": "uneven batch split: rank 1 gets 1.5 x rank 0's images per step (24 and 16), "
        "so rank 1 computes 1.5 x as long and rank 0 waits in every all-reduce",
        "fix": "the same 40 images split evenly across both ranks (20 each), as a "
        "DistributedSampler's equal shards give",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
    "v210": {
        "name": "load_imbalance_host",
        "model": "LayoutLM-style document token classifier (BERT's WordPiece vocab 30522, 1-D "
        "positions, token types and LayoutLM's 2-D embeddings of each token's box: x0, y0, x1, "
        "y1 on a 0-1000 grid, its height and width; 8 post-LayerNorm layers d 512, 8 heads of "
        "64, MLP 2048 with GELU, no dropout; a Linear to FUNSD's 7 BIO labels, the word pieces "
        "after a word's first unlabelled; 43 M parameters) on synthetic form pages of 512 "
        "tokens under DDP on 2 GPUs, batch 48 pages per rank, bf16 autocast, AdamW(fused=True)",
        "planted": "rank 0 alone, after each optimizer step, copies the step's predictions and "
        "labels to the host with .tolist() and computes its training metric in Python (token "
        "accuracy and seqeval-style entity precision, recall and F1: label names per scored "
        "token, entities found page by page): ~12 k scored tokens a step, its GPU idle "
        "meanwhile, so rank 1 waits in every all-reduce",
        "fix": "the same counts kept on the GPU (entities found with cummax/cummin and "
        "index_add_, no host copy), read after training, never in the step",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
    "v211": {
        "name": "activation_checkpointing",
        "model": "MPT-style decoder LM (vocab 50368, the embedding tied to the "
        "output, no position embeddings: ALiBi biases on the attention scores, passed to "
        "scaled_dot_product_attention as a causal additive mask; 6 pre-LayerNorm blocks d 2048 "
        "without biases, 16 heads of 128, MLP 8192 with GELU; 405 M parameters) under FSDP2 on "
        "2 GPUs (fully_shard per block + root, its defaults: reshard after forward; bf16 "
        "parameters, fp32 reduce), 3 sequences of 1024 tokens per rank, AdamW(fused=True): ~7 "
        "GB of the GPU's 141 used, most of its memory free",
        "planted": "torch.utils.checkpoint (use_reentrant=False) on every block (6 FSDP2 "
        "modules, each recomputed in the backward)",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
        "gpus": 2,
    },
    "v212": {
        "name": "overlap_communication",
        "model": "Marian-style translation transformer (transformer-big: a shared vocab of 32000 "
        "whose embedding is the source, target and output matrix, scaled by sqrt(d), sinusoidal "
        "positions; 6 encoder and 6 decoder post-LayerNorm layers d 1024, 16 heads, FFN 4096 "
        "with ReLU, the decoder's with causal self-attention and cross-attention; 209 M "
        "parameters; label smoothing 0.1) under DDP on 2 GPUs, 96 sentence pairs of 48 source "
        "and 48 target tokens per rank, bf16 autocast, AdamW(fused=True): 836 MB of fp32 "
        "gradients on a step of short sentences",
        "planted": "DDP(bucket_cap_mb=4096): one bucket, all-reduced after backward ends",
        "fix": "DDP's defaults (bucket_cap_mb=25): each bucket all-reduced as soon as backward "
        "has made its gradients, the decoder's under the encoder's backward",
        "expected_fix": "overlap_communication",
        "gpus": 2,
    },
    "v213": {
        "name": "fsdp_prefetch",
        "model": "StableLM-style decoder LM (StableLM-3B's layout at d 2048: vocab 50304, untied "
        "embedding and head; 8 pre-LayerNorm layers, no Linear biases, 16 heads of 128 with "
        "rotary positions on a quarter of each head, causal scaled_dot_product_attention, "
        "SwiGLU MLP 5632; 51 M parameters a layer, 617 M in all) under FSDP2 on 2 GPUs "
        "(fully_shard per layer + root, reshard after forward, bf16 parameters, fp32 reduce), "
        "4 sequences of 256 tokens per rank, AdamW(fused=True): each layer's 100 MB all-gather "
        "as long as its forward compute; unshard with async_op=True (the all-gather buffers made "
        "in the compute stream, so that memory is not fragmented across FSDP2's streams) in "
        "both variants",
        "planted": "FSDPModule._set_unshard_async_op(True) without explicit prefetching: each "
        "layer's all-gather is issued in its own pre-forward and waited on at once, serialized "
        "behind the compute before it (FSDP2's implicit forward prefetch off)",
        "fix": "the same, with gpuscope's fsdp_prefetch code: "
        "set_modules_to_forward_prefetch([next]) and set_modules_to_backward_prefetch([prev]) "
        "over the layers",
        "expected_fix": "fsdp_prefetch",
        "gpus": 2,
    },
    "v214": {
        "name": "null_dataloader_workers",
        "model": "MobileViT-style hybrid CNN (MobileViT-S: a 3x3 stride-2 stem 16 ch, MobileNetV2 "
        "inverted residuals of expansion 4 with SiLU to 32/64/96/128/160 ch, and three "
        "MobileViT blocks at 32, 16 and 8 pixels: a 3x3 and a 1x1 conv to d 144/192/240, "
        "2/4/3 pre-LayerNorm transformer layers of 4 heads over the unfolded 2 x 2 patches, "
        "MLP 2 x with SiLU, fold, a 1x1 conv back and a 3x3 conv fusing it with the input; a "
        "1x1 conv to 640, pool, 1000 classes; 5.6 M parameters) on 256 x 256 images under DDP "
        "on 2 GPUs, batch 96 per rank, bf16 autocast, channels_last, AdamW(fused=True); each "
        "sample a slice of a pre-made uint8 tensor on the host (each rank its own): the step is "
        "GPU-bound",
        "planted": "DataLoader(num_workers=0)",
        "fix": "DataLoader(num_workers=4, persistent_workers=True) (gains ~0: loading is a slice "
        "and a stack, done while the GPU computes)",
        "expected_fix": "dataloader_workers",
        "gpus": 2,
        "null": True,
    },
}


def _ddp_ids(k: Kit, device: str):
    """DDP's ``device_ids`` on this rank: its GPU, or None on the CPU."""
    return [k.torch.device(device).index] if k.cuda else None


# ---------------------------------------------------------------- v209: ResNeSt, uneven batches


def _resnest_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # H200, per rank: 20 images of 384 x 384 (the fixed split) are 2.23 TFLOP of convolutions
    # a step (FlopCounter; 1.79 at 16, 2.68 at 24), ~11 ms at ~200 TFLOP/s (3x3 convs of 2
    # groups, 1x1 convs of 64-2048 ch), and ~57 GB of fp32 non-conv traffic (BatchNorm, ReLU, the
    # split attention's sums, pools and r-softmax, the residuals), ~30 GB in bf16 with fp32
    # statistics, ~9 ms: ~1 ms an image, ~20 ms at 20; fused AdamW over 27.5 M parameters
    # ~0.2 ms; the 110 MB all-reduce in DDP's buckets under the backward. ~1,000 kernels (~10
    # ms of host): GPU-bound on both ranks at 16 images. Planted: rank 0 16 images ~16 ms, rank
    # 1 24 ~24 ms, rank 0 waiting ~8 ms in the all-reduces; fixed: 20 each ~20 ms: ~16 % off
    # (1 - 20/24 = 16.7 % less the step's fixed costs; v172's 1.5 x split timed 14.3 %)
    stem, widths, depths, img, classes, base = (
        (8, (4, 8, 8, 8), (1, 1, 1, 1), 32, 10, 4)
        if k.quick
        else (32, (64, 128, 256, 512), (3, 4, 6, 3), 384, 1000, 16)
    )
    by_rank = [base * 5 // 4] * 2 if fixed else [base, base * 3 // 2]
    batch = by_rank[rank]
    radix = 2

    def bn_relu(c: int) -> list:
        return [nn.BatchNorm2d(c), nn.ReLU()]

    class SplitAttention(nn.Module):  # ResNeSt's split-attention 3x3 conv, radix 2
        def __init__(self, c: int) -> None:
            super().__init__()
            inter = max(c * radix // 4, 32)
            self.conv = nn.Conv2d(c, c * radix, 3, 1, 1, groups=radix, bias=False)
            self.bn0 = nn.BatchNorm2d(c * radix)
            self.fc1, self.bn1 = nn.Conv2d(c, inter, 1), nn.BatchNorm2d(inter)
            self.fc2 = nn.Conv2d(inter, c * radix, 1)

        def forward(self, x):
            x = F.relu(self.bn0(self.conv(x)))
            b, c2, h, w = x.shape
            splits = x.view(b, radix, c2 // radix, h, w)
            gap = F.adaptive_avg_pool2d(splits.sum(1), 1)
            att = self.fc2(F.relu(self.bn1(self.fc1(gap))))
            att = att.view(b, radix, c2 // radix, 1, 1).softmax(1)  # r-softmax over the splits
            return (splits * att).sum(1)

    class Block(nn.Module):  # bottleneck, split attention, avd pooling, avg-down shortcut
        def __init__(self, ci: int, w: int, stride: int) -> None:
            super().__init__()
            co = 4 * w
            self.conv1, self.bn1 = nn.Conv2d(ci, w, 1, bias=False), nn.BatchNorm2d(w)
            self.split = SplitAttention(w)
            self.avd = nn.AvgPool2d(3, stride, 1) if stride > 1 else None
            self.conv3, self.bn3 = nn.Conv2d(w, co, 1, bias=False), nn.BatchNorm2d(co)
            self.down = None
            if stride > 1 or ci != co:
                pool = nn.AvgPool2d(stride, stride, ceil_mode=True, count_include_pad=False)
                self.down = nn.Sequential(
                    pool if stride > 1 else nn.Identity(),
                    nn.Conv2d(ci, co, 1, bias=False),
                    nn.BatchNorm2d(co),
                )

        def forward(self, x):
            h = self.split(F.relu(self.bn1(self.conv1(x))))
            if self.avd is not None:
                h = self.avd(h)
            h = self.bn3(self.conv3(h))
            return F.relu(h + (x if self.down is None else self.down(x)))

    mods: list = [
        nn.Conv2d(3, stem, 3, 2, 1, bias=False),
        *bn_relu(stem),
        nn.Conv2d(stem, stem, 3, 1, 1, bias=False),
        *bn_relu(stem),
        nn.Conv2d(stem, 2 * stem, 3, 1, 1, bias=False),
        *bn_relu(2 * stem),
        nn.MaxPool2d(3, 2, 1),
    ]
    ci = 2 * stem
    for i, (w, n) in enumerate(zip(widths, depths, strict=True)):
        for j in range(n):
            mods.append(Block(ci, w, 2 if (i and not j) else 1))
            ci = 4 * w
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, classes)]
    model = nn.Sequential(*mods).to(device, memory_format=torch.channels_last)
    run = DDP(model, device_ids=_ddp_ids(k, device))
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(209 + rank)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        with k.ac:
            logits = run(x)
        return F.cross_entropy(logits.float(), y)

    k.meta["batch_by_rank"] = by_rank
    k.meta["samples_per_job_step"] = sum(by_rank)
    k.meta["extra_work_rank"] = None if fixed else 1
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v210: LayoutLM, rank 0's metric

FUNSD_LABELS = ("O", "B-HEADER", "I-HEADER", "B-QUESTION", "I-QUESTION", "B-ANSWER", "I-ANSWER")
"""v210's token labels (FUNSD's BIO tags)."""


def _layout_batch(torch, batch: int, seq: int, vocab: int, gen):
    """v210's synthetic form pages: (token ids, boxes (x0, y0, x1, y1) on LayoutLM's 0-1000 grid,
    BIO labels with -100 on [CLS], [SEP] and every word's continuation pieces). Words of 1-3
    WordPiece tokens set in lines of 6-14 words; entities of 1-6 words; every page fills the
    ``seq`` tokens (long forms cut into windows, as LayoutLM's fine-tuning does)."""
    ids = torch.zeros(batch, seq, dtype=torch.long)
    boxes = torch.zeros(batch, seq, 4, dtype=torch.long)
    labels = torch.full((batch, seq), -100, dtype=torch.long)
    for b in range(batch):
        pos, line, x, in_line, left, kind = 1, 0, 20, 0, 0, 0
        words = torch.randint(1, 4, (seq,), generator=gen).tolist()
        lens = torch.randint(1, 7, (seq,), generator=gen).tolist()
        kinds = torch.randint(0, 4, (seq,), generator=gen).tolist()
        widths = torch.randint(30, 90, (seq,), generator=gen).tolist()
        for w in range(seq):
            n = words[w]
            if pos + n > seq - 1:
                break
            if left == 0:  # a new entity (0: other) of lens[w] words
                kind, left, first = kinds[w], lens[w], True
            y0 = 30 + 22 * line
            box = [x, y0, min(1000, x + widths[w]), y0 + 18]
            ids[b, pos : pos + n] = torch.randint(1000, vocab, (n,), generator=gen)
            boxes[b, pos : pos + n] = torch.tensor(box)
            labels[b, pos] = 0 if kind == 0 else 2 * kind - (1 if first else 0)
            pos, left, first, x = pos + n, left - 1, False, x + widths[w] + 8
            in_line += 1
            if in_line >= 6 + (w % 9) or x > 900:
                line, x, in_line = (line + 1) % 44, 20, 0
        ids[b, 0], ids[b, pos:] = 101, 102  # [CLS], [SEP] (and [SEP]s to the window's end)
        boxes[b, pos:] = torch.tensor([1000, 1000, 1000, 1000])
    return ids, boxes, labels


def _chunks(tags: list[str]) -> list[tuple[int, int, str]]:
    """seqeval's entities of one page's BIO tag names (its scored tokens only): (first, last,
    type) of each run that a B- tag starts, or an I- tag whose previous tag is of another type,
    and that continues over I- tags of its type. Pure Python, as seqeval is."""
    found, start = [], 0
    for i, tag in enumerate(tags):
        if tag == "O":
            continue
        kind = tag[2:]
        prev = tags[i - 1] if i else "O"
        if tag[0] == "B" or prev[2:] != kind:
            start = i
        nxt = tags[i + 1] if i + 1 < len(tags) else "O"
        if not (nxt[0] == "I" and nxt[2:] == kind):
            found.append((start, i, kind))
    return found


def _chunk_marks(torch, tag, scored, pos):
    """:func:`_chunks` on the GPU, over (pages, tokens) label ids (``scored``: the tokens with a
    gold label; ``pos``: each token's position) without leaving it: each token's entity type (0:
    O or not scored), whether an entity starts there, and the last token of the entity running
    through it (the page's length where none)."""
    t = tag.shape[1]
    kind = torch.where(scored, (tag + 1) // 2, 0)
    is_b = scored & (tag % 2 == 1)
    is_i = scored & (tag > 0) & (tag % 2 == 0)
    last = torch.where(scored, pos, -1).cummax(1).values  # the last scored token up to here
    prev = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], 1)
    prev_kind = torch.where(prev >= 0, kind.gather(1, prev.clamp_min(0)), 0)
    first = torch.where(scored, pos, t).flip(1).cummin(1).values.flip(1)  # the next from here
    nxt = torch.cat([first[:, 1:], torch.full_like(first[:, :1], t)], 1)
    at = nxt.clamp_max(t - 1)
    goes_on = (nxt < t) & is_i.gather(1, at) & (kind.gather(1, at) == kind)
    start = (kind > 0) & (is_b | (prev_kind != kind))
    end = (kind > 0) & ~goes_on
    end_at = torch.where(end, pos, t).flip(1).cummin(1).values.flip(1)
    return kind, start, end_at


_KINDS = {"HEADER": 1, "QUESTION": 2, "ANSWER": 3}
"""v210's entity types by index (a label id's type: (id + 1) // 2)."""


def _layoutlm_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # H200, per rank 48 pages of 512 tokens (24576): 3.71 TFLOP of bf16 matmuls a step
    # (FlopCounter), ~6.5 ms at ~580 TFLOP/s; flash attention 0.21 TFLOP forward, ~0.7 a step,
    # ~1.5 ms; ~30 GB of fp32 non-matmul traffic (post-LayerNorms, GELU, residuals, the seven
    # embeddings and their backward), ~18 GB under autocast, ~5 ms; fused AdamW over 43 M
    # ~0.4 ms: ~14 ms against ~400 kernels (~5 ms of host), DDP's 173 MB all-reduce under the
    # backward. Planted: rank 0's .tolist() waits for its GPU to drain the step, then the metric
    # runs in Python: 24576 tokens zipped with their labels, ~12 k scored ones named, entities
    # found page by page: ~8 ms on the 2-core VM this was written on (timed there), ~5-8 ms on
    # the device's host, its GPU idle meanwhile; rank 1 waits for it in the next step's
    # all-reduces: ~20-22 ms. Fixed: the same counts in ~100 small kernels on rank 0's GPU (~1
    # ms of host under the GPU's ~14, ~0.2 ms of GPU), never read in the step: ~14-15 ms: ~30 %
    # off (v188's per-head logging on rank 0 timed 28.9 %)
    vocab, d, heads, layers, seq, batch = (
        (1200, 32, 4, 2, 32, 2) if k.quick else (30522, 512, 8, 8, 512, 48)
    )
    hd, n_labels = d // heads, len(FUNSD_LABELS)

    class Layer(nn.Module):  # BERT's: post-LayerNorm, GELU, no dropout
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.n1, self.n2 = nn.LayerNorm(d, eps=1e-12), nn.LayerNorm(d, eps=1e-12)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(x).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v)
            x = self.n1(x + self.o(a.transpose(1, 2).reshape(b, t, d)))
            return self.n2(x + self.fc2(F.gelu(self.fc1(x))))

    class LayoutLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.x_pos, self.y_pos = nn.Embedding(1024, d), nn.Embedding(1024, d)
            self.h_pos, self.w_pos = nn.Embedding(1024, d), nn.Embedding(1024, d)
            self.token_type = nn.Embedding(2, d)
            self.norm = nn.LayerNorm(d, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.classifier = nn.Linear(d, n_labels)

        def forward(self, ids, box):
            x0, y0, x1, y1 = box.unbind(-1)
            x = self.word(ids) + self.pos.weight[: ids.shape[1]] + self.token_type.weight[0]
            x = x + self.x_pos(x0) + self.y_pos(y0) + self.x_pos(x1) + self.y_pos(y1)
            x = self.norm(x + self.h_pos(y1 - y0) + self.w_pos(x1 - x0))
            for layer in self.layers:
                x = layer(x)
            return self.classifier(x)

    model = LayoutLM().to(device)
    run = DDP(model, device_ids=_ddp_ids(k, device))
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(210 + rank)
    ids, boxes, labels = _layout_batch(torch, batch, seq, vocab, gen)
    scored_tokens = int((labels >= 0).sum())
    ids, boxes, labels = ids.to(device), boxes.to(device), labels.to(device)
    scored = labels >= 0
    pos = torch.arange(seq, device=device).expand(batch, seq)
    logs = rank == 0  # the metric is rank 0's alone, in both variants
    # token accuracy (right, scored), then per entity type: gold, predicted, right entities
    tally = [0] * 11  # planted: on the host, Python ints
    counts = torch.zeros(11, dtype=torch.long, device=device)  # fixed: on the GPU
    log: dict = {}

    def host_metric(pred) -> None:  # planted, rank 0: as a token-classification example does
        preds, golds = pred.tolist(), labels.tolist()
        names = FUNSD_LABELS
        pairs = [list(zip(ps, gs, strict=True)) for ps, gs in zip(preds, golds, strict=True)]
        true_p = [[names[p] for p, g in page if g != -100] for page in pairs]
        true_g = [[names[g] for _, g in page if g != -100] for page in pairs]
        for ps, gs in zip(true_p, true_g, strict=True):
            tally[0] += sum(p == g for p, g in zip(ps, gs, strict=True))
            tally[1] += len(gs)
            found_g, found_p = _chunks(gs), _chunks(ps)
            for *_, kind in found_g:
                tally[1 + _KINDS[kind]] += 1
            for *_, kind in found_p:
                tally[4 + _KINDS[kind]] += 1
            for *_, kind in set(found_g) & set(found_p):
                tally[7 + _KINDS[kind]] += 1
        right, said, true = sum(tally[8:]), sum(tally[5:8]), sum(tally[2:5])
        prec, rec = right / max(1, said), right / max(1, true)
        log.update(accuracy=tally[0] / max(1, tally[1]), precision=prec, recall=rec)
        log["f1"] = 2 * prec * rec / max(1e-9, prec + rec)

    def gpu_metric(pred) -> None:  # fixed, rank 0: the same counts, never read in the step
        gk, gs, ge = _chunk_marks(torch, labels, scored, pos)
        pk, ps, pe = _chunk_marks(torch, pred, scored, pos)
        right = gs & ps & (gk == pk) & (ge == pe)

        def by_kind(flag, kind):
            n = torch.zeros(4, dtype=torch.long, device=device)
            return n.index_add_(0, kind.flatten(), flag.flatten().long())[1:]

        ok = ((pred == labels) & scored).sum().view(1)
        counts.add_(
            torch.cat(
                [ok, scored.sum().view(1), by_kind(gs, gk), by_kind(ps, pk), by_kind(right, gk)]
            )
        )

    def step():
        with k.ac:
            logits = run(ids, boxes)
        loss = F.cross_entropy(
            logits.float().view(-1, n_labels), labels.view(-1), ignore_index=-100
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if logs:
            pred = logits.detach().argmax(-1)
            (gpu_metric if fixed else host_metric)(pred)

    def metric_counts() -> list[int]:
        """The metric's counts so far, whichever way they were kept (read after training)."""
        return counts.tolist() if fixed else list(tally)

    step.metric_counts = metric_counts  # type: ignore[attr-defined]
    k.meta["extra_host_work_rank"] = 0
    k.meta["metric"] = "token accuracy and entity precision/recall/F1, " + (
        "counted on the GPU" if fixed else "in Python on the host"
    )
    k.meta["host_metric_tokens_per_step"] = 0 if (fixed or not logs) else batch * seq
    k.meta["scored_tokens"] = scored_tokens
    return step, batch, model


# ---------------------------------------------------------------- v211: MPT under FSDP2, checkpointed


def _fsdp2(k: Kit, model, blocks) -> None:
    """FSDP2 as its defaults have it, over ``model``: ``fully_shard`` per block and the root,
    bf16 parameters, fp32 gradient reduction (reshard after forward: the default)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=k.torch.bfloat16, reduce_dtype=k.torch.float32)
    for blk in blocks:
        fully_shard(blk, mp_policy=mp)
    fully_shard(model, mp_policy=mp)


def _alibi(torch, heads: int, seq: int, dtype, device: str):
    """MPT's ALiBi as an additive attention bias (1, heads, seq, seq): each head's slope times
    minus the distance back to the key, and -inf on the keys after the query (causal)."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1) / heads)
    pos = torch.arange(seq)
    back = (pos[:, None] - pos[None, :]).float()  # query - key
    bias = -slopes[:, None, None] * back
    bias = bias.masked_fill(back < 0, float("-inf"))
    return bias[None].to(device=device, dtype=dtype)


def _mpt_fsdp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    # H200, per rank 3 x 1024 tokens. FlopCounter: 7.47 TFLOP of bf16 matmuls a step fixed,
    # 8.70 planted (non-reentrant checkpointing recomputes each block but its last matmul, whose
    # output nothing saves): ~13 ms fixed at ~570 TFLOP/s; attention with ALiBi's additive bias
    # runs the memory-efficient kernel over every key (no causal skipping): 0.155 TFLOP forward,
    # ~0.54 a step, ~2.2 ms at ~250; ~16 GB of fp32 non-matmul traffic (bf16 under FSDP2's bf16
    # parameters, ~8 GB), ~2.3 ms; FSDP2's copies in and out (~20 bytes a parameter, 405 M: ~2.3
    # ms); fused AdamW over 203 M local fp32 parameters (~5.7 GB, ~1.6 ms); the root's tied
    # embedding: its 206 MB all-gather and fp32 reduce-scatter exposed (~1.1 ms); each block's
    # 100 MB all-gathers (forward, and again in the backward) and reduce-scatter under its ~3 ms
    # of compute: fixed ~22-23 ms, ~330 kernels and ~120 FSDP2 ops (~5 ms of host). Planted: the
    # recomputed forward, +1.23 TFLOP (~2.2 ms), the attention's forward again (~0.6 ms) and ~2
    # GB more elementwise traffic (~0.6 ms): ~26 ms, ~13 % off (v201's checkpointing, one GPU,
    # estimated 17-22 %, timed 46.8). Memory: ~1.4 GB of saved activations fixed (~0.4
    # planted), ~2 GB of fp32 logits and their gradients, ~3.2 GB of sharded parameters,
    # gradients and AdamW's moments: ~7 GB of 141
    vocab, d, heads, layers, seq, batch = (
        (256, 32, 4, 2, 16, 2) if k.quick else (50368, 2048, 16, 6, 1024, 3)
    )
    hd = d // heads
    bias = _alibi(torch, heads, seq, torch.bfloat16 if k.cuda else torch.float32, device)

    class Block(nn.Module):  # MPT's: pre-LayerNorm without biases, no Linear biases, GELU 4 x
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
            self.wqkv = nn.Linear(d, 3 * d, bias=False)
            self.out = nn.Linear(d, d, bias=False)
            self.up, self.down = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.wqkv(self.n1(x)).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v, attn_mask=bias)  # ALiBi, causal
            x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
            return x + self.down(F.gelu(self.up(self.n2(x))))

    class MPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, d)  # tied to the output, no position embeddings
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm_f = nn.LayerNorm(d, bias=False)

        def forward(self, idx):
            x = self.wte(idx)
            for blk in self.blocks:  # planted: every block recomputed in the backward
                x = blk(x) if fixed else checkpoint(blk, x, use_reentrant=False)
            return F.linear(self.norm_f(x), self.wte.weight)

    with torch.device(device):
        model = MPT()
    _fsdp2(k, model, list(model.blocks))
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(211 + rank)
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

    def loss_fn():
        logits = model(idx[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

    k.meta["fsdp"] = "fully_shard per block + root, defaults (reshard after forward), bf16 params"
    k.meta["checkpointed_modules"] = 0 if fixed else layers
    k.meta["params"] = sum(p.numel() for p in model.parameters())  # DTensor: global
    k.meta["tokens_per_rank"] = batch * seq
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v212: Marian, one DDP bucket


def _sinusoids(torch, n: int, d: int):
    """Sinusoidal position embeddings (n, d): sines in the first half, cosines in the second
    (Marian's layout)."""
    inv = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([ang.sin(), ang.cos()], 1)


def _marian_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # H200, per rank 96 pairs of 48 + 48 tokens (4608 each side): 5.78 TFLOP of bf16 matmuls a
    # step (FlopCounter: the encoder's 76 M weights on the source tokens, the decoder's 101 M and
    # the shared 33 M output on the target ones), ~10.5 ms at ~550 TFLOP/s; attention over 48
    # tokens ~0.1 ms; ~29 GB of fp32 non-matmul traffic (post-LayerNorms, ReLU, residuals, the
    # fp32 logits and their label-smoothed loss), ~17 GB under autocast, ~4.8 ms; fused AdamW
    # over 209 M (~5.9 GB) ~1.7 ms: ~17 ms against ~800 kernels (~8-10 ms of host): GPU-bound.
    # 836 MB of fp32 gradients: the all-reduce at ~360 GB/s ~2.3 ms; DDP's copies into its
    # buckets and out (in both) ~0.5 ms. Planted: the 4 GB bucket (after DDP's first of 1 MB)
    # waits for the whole backward, then its all-reduce runs alone: ~19.5 ms; fixed: the
    # decoder's buckets all-reduced under the encoder's backward and the rest, the shared
    # embedding's 131 MB bucket (made last) a ~0.4 ms tail: ~17.4 ms, ~11 % off (v187: 9.3 %)
    vocab, d, heads, ff, layers, src, tgt, batch = (
        (256, 32, 4, 64, 2, 12, 10, 4) if k.quick else (32000, 1024, 16, 4096, 6, 48, 48, 96)
    )
    hd = d // heads

    def attend(q_lin, kv_lin, o_lin, x, mem, causal: bool):
        b, t, _ = x.shape
        q = q_lin(x).view(b, t, heads, hd).transpose(1, 2)
        kk, v = kv_lin(mem).view(b, mem.shape[1], 2, heads, hd).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, kk, v, is_causal=causal)
        return o_lin(a.transpose(1, 2).reshape(b, t, d))

    class EncoderLayer(nn.Module):  # post-LayerNorm, ReLU: Marian's transformer-big
        def __init__(self) -> None:
            super().__init__()
            self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

        def forward(self, x):
            x = self.n1(x + attend(self.q, self.kv, self.o, x, x, False))
            return self.n2(x + self.fc2(F.relu(self.fc1(x))))

    class DecoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
            self.cq, self.ckv, self.co = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
            self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

        def forward(self, y, mem):
            y = self.n1(y + attend(self.q, self.kv, self.o, y, y, True))
            y = self.n2(y + attend(self.cq, self.ckv, self.co, y, mem, False))
            return self.n3(y + self.fc2(F.relu(self.fc1(y))))

    class Marian(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = nn.Embedding(vocab, d)  # source, target and output: one matrix
            self.encoder = nn.ModuleList(EncoderLayer() for _ in range(layers))
            self.decoder = nn.ModuleList(DecoderLayer() for _ in range(layers))
            self.register_buffer("pos", _sinusoids(torch, max(src, tgt), d), persistent=False)
            self.register_buffer("final_logits_bias", torch.zeros(vocab), persistent=False)

        def forward(self, source, target):
            x = self.shared(source) * d**0.5 + self.pos[: source.shape[1]]
            for layer in self.encoder:
                x = layer(x)
            y = self.shared(target) * d**0.5 + self.pos[: target.shape[1]]
            for layer in self.decoder:
                y = layer(y, x)
            return F.linear(y, self.shared.weight) + self.final_logits_bias

    model = Marian().to(device)
    kw = {} if fixed else {"bucket_cap_mb": 4096}
    run = DDP(model, device_ids=_ddp_ids(k, device), **kw)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(212 + rank)
    source = torch.randint(3, vocab, (batch, src), generator=gen)
    source[:, -1] = 0  # </s>
    target = torch.randint(3, vocab, (batch, tgt + 1), generator=gen)
    target[:, 0], target[:, -1] = 1, 0  # the decoder's start token, then </s>
    source, target = source.to(device), target.to(device)

    def loss_fn():
        with k.ac:
            logits = run(source, target[:, :-1])
        return F.cross_entropy(
            logits.float().reshape(-1, vocab), target[:, 1:].reshape(-1), label_smoothing=0.1
        )

    k.meta["ddp"] = kw or "defaults (bucket_cap_mb=25)"
    k.meta["bucket_cap_mb"] = run.bucket_bytes_cap // (1 << 20)
    k.meta["grad_bytes"] = 4 * sum(p.numel() for p in model.parameters())
    k.meta["tokens_per_rank"] = batch * (src + tgt)
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v213: StableLM, FSDP2 serialized


def _stablelm_fsdp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch, nn, F = k.torch, k.nn, k.F
    # H200, per rank 1024 tokens. A layer of 51.4 M parameters: forward 2 x 1024 x 51.4 M = 0.105
    # TFLOP, ~0.23 ms at ~450 TFLOP/s (1024-row GEMMs), backward ~0.46 ms (FlopCounter: 3.16
    # TFLOP a step with the head's 103 M); its bf16 all-gather (each rank receives 51 MB, ~0.2
    # ms at ~300 GB/s), its copy-in (the fp32 shard cast to bf16, ~0.05 ms) and copy-out (~0.06
    # ms) on the compute stream; its fp32 reduce-scatter (103 MB each way, ~0.4 ms). Planted, a
    # layer's forward is copy-in, all-gather, copy-out, compute, one after another: ~0.6 ms, 4.8
    # ms for 8; fixed, each all-gather runs beside the layer before: ~0.4 ms a layer, 3.2 ms.
    # Both: the backward ~0.6-0.65 ms a layer (the prefetched all-gather and the reduce-scatter
    # about its compute), ~5 ms; the root's embedding and head (206 M): their all-gather (~0.7
    # ms) and fp32 reduce-scatter (~1.3 ms) exposed, the head ~1.4 ms and the fp32 logits' loss
    # (~0.3 ms); fused AdamW over 308 M local fp32 parameters (~8.6 GB, ~2.5 ms); ~6 GB of
    # elementwise traffic (~1.7 ms), ~600 kernels (~6 ms of host): planted ~17 ms, fixed ~15.5,
    # ~10 % off (v170, FSDP2's default prefetch against gated all-gathers: 17.6 %)
    vocab, d, heads, hid, layers, seq, batch = (
        (256, 32, 4, 48, 3, 16, 2) if k.quick else (50304, 2048, 16, 5632, 8, 256, 4)
    )
    hd = d // heads
    rot = hd // 4  # rotary on a quarter of each head, as StableLM's
    inv = 1.0 / 10000 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot)
    ang = torch.arange(seq, dtype=torch.float32)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos().to(device), ang.sin().to(device)

    def rope(x):  # rotate-half form on the first ``rot`` dims of each head
        r, rest = x[..., :rot], x[..., rot:]
        r1, r2 = r.chunk(2, -1)
        r = r * cos.to(x.dtype) + torch.cat([-r2, r1], -1) * sin.to(x.dtype)
        return torch.cat([r, rest], -1)

    class Layer(nn.Module):  # StableLM-3B's: pre-LayerNorm, no Linear biases, SwiGLU
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            self.v, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            self.gate = nn.Linear(d, hid, bias=False)
            self.up = nn.Linear(d, hid, bias=False)
            self.down = nn.Linear(hid, d, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.n1(x)

            def split(y):
                return y.view(b, t, heads, hd).transpose(1, 2)

            q, kk = rope(split(self.q(h))), rope(split(self.k(h)))
            a = F.scaled_dot_product_attention(q, kk, split(self.v(h)), is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            h = self.n2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class StableLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, vocab, bias=False)  # untied

        def forward(self, idx):
            x = self.embed(idx)
            for layer in self.layers:
                x = layer(x)
            return self.lm_head(self.norm(x))

    with torch.device(device):
        model = StableLM()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    # Both: each unshard issued with async_op=True, its all-gather buffers made in the compute
    # stream (FSDPModule._set_unshard_async_op: no memory fragmented across FSDP2's streams), which
    # turns off FSDP2's implicit prefetching: each layer's all-gather is issued in its own
    # pre-forward and waited on at once, behind the compute before it
    model._set_unshard_async_op(True)
    how = "fully_shard per layer + root, bf16 params, fp32 reduce; unshard async_op=True"
    if fixed:  # gpuscope's fsdp_prefetch code, as it reads
        for cur, nxt in pairwise(model.layers):  # zip(model.layers, model.layers[1:])
            cur.set_modules_to_forward_prefetch([nxt])
        for prev, cur in pairwise(model.layers):  # zip(model.layers[1:], model.layers)
            cur.set_modules_to_backward_prefetch([prev])
        how += "; explicit prefetch: forward [next], backward [prev]"
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(213 + rank)
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

    def loss_fn():
        logits = model(idx[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

    k.meta["fsdp"] = how
    k.meta["unshard_async_op"] = True
    k.meta["prefetch"] = "explicit" if fixed else "none (async unshard, no explicit prefetch)"
    k.meta["forward_prefetch_set"] = layers - 1 if fixed else 0
    k.meta["backward_prefetch_set"] = layers - 1 if fixed else 0
    k.meta["reshard_after_forward"] = True
    k.meta["params"] = sum(p.numel() for p in model.parameters())  # DTensor: global
    k.meta["tokens_per_rank"] = batch * seq
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v214: MobileViT, workers (null)


PremadeCrops = PremadeImages
"""v214's dataset (record_common.PremadeImages): each sample a slice of a pre-made uint8 tensor."""


def _mobilevit_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    torch, nn, F = k.torch, k.nn, k.F
    # H200, per rank 96 images of 256 x 256: 2.41 TFLOP of convolutions and matmuls a step
    # (FlopCounter), at 16-640 ch and many of them depthwise, ~12-15 ms at ~150-200 TFLOP/s;
    # ~62 GB of fp32 non-conv traffic (BatchNorm, SiLU, the residuals, LayerNorms, the unfold
    # and fold copies), ~33 GB in bf16, ~9-10 ms; attention over 256, 64 and 16 patches (head
    # dims 36, 48 and 60, as timm's 4 heads give: flash pads them to 8, or the math kernel runs)
    # ~0.2-1.5 ms; fused AdamW over 5.6 M ~0.1 ms: ~22-26 ms against ~700 kernels (~7 ms of
    # host): GPU-bound,
    # the host ~15 ms ahead of the GPU when the step's last launch is issued. Loading: 96 slices
    # of a pre-made uint8 tensor stacked into 19 MB (~2-3 ms on one core: torchrun sets one
    # intra-op thread) before the forward, while the GPU runs the last ~15 ms of the previous
    # step; the copy to the GPU (from pageable memory, ~1-2 ms) is the same in both variants.
    # Planted, the main process makes each batch; fixed, 4 persistent workers a rank do (the
    # batch handed over in shared memory): gains ~0 (v83, one GPU: -0.6 %)
    side, batch, n, workers, classes = (64, 4, 32, 2, 10) if k.quick else (256, 96, 768, 4, 1000)
    # MobileViT-S: (channels, transformer width, layers) of the three MobileViT blocks
    chans, mv, last = (
        ((8, 8, 16, 16, 24, 24), ((16, 2), (24, 2), (32, 1)), 64)
        if k.quick
        else ((16, 32, 64, 96, 128, 160), ((144, 2), (192, 4), (240, 3)), 640)
    )

    def cbs(ci: int, co: int, ks: int = 1, s: int = 1, groups: int = 1, act: bool = True):
        mods = [nn.Conv2d(ci, co, ks, s, ks // 2, groups=groups, bias=False), nn.BatchNorm2d(co)]
        return nn.Sequential(*mods, nn.SiLU()) if act else nn.Sequential(*mods)

    class MV2(nn.Module):  # MobileNetV2's inverted residual, expansion 4, SiLU
        def __init__(self, ci: int, co: int, s: int) -> None:
            super().__init__()
            h = 4 * ci
            self.body = nn.Sequential(cbs(ci, h), cbs(h, h, 3, s, groups=h), cbs(h, co, act=False))
            self.res = s == 1 and ci == co

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    class Layer(nn.Module):  # pre-LayerNorm, 4 heads, MLP 2 x with SiLU
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
            self.heads = 4

        def forward(self, x):
            b, t, dim = x.shape
            q, kk, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, dim))
            return x + self.fc2(F.silu(self.fc1(self.n2(x))))

    class MobileViTBlock(nn.Module):  # local convs, global attention over 2x2 patches, fusion
        def __init__(self, c: int, dim: int, depth: int) -> None:
            super().__init__()
            self.local = nn.Sequential(cbs(c, c, 3), nn.Conv2d(c, dim, 1, bias=False))
            self.layers = nn.Sequential(*[Layer(dim) for _ in range(depth)], nn.LayerNorm(dim))
            self.proj = cbs(dim, c)
            self.fuse = cbs(2 * c, c, 3)

        def forward(self, x):
            b, _, h, w = x.shape
            y = self.local(x)
            dim = y.shape[1]
            # unfold: (b, dim, h, w) -> (b * 4, h * w / 4, dim): each of the 4 pixel positions of
            # a 2 x 2 patch attends across all patches
            p = y.reshape(b, dim, h // 2, 2, w // 2, 2).permute(0, 3, 5, 2, 4, 1)
            p = self.layers(p.reshape(b * 4, (h // 2) * (w // 2), dim))
            y = p.reshape(b, 2, 2, h // 2, w // 2, dim).permute(0, 5, 3, 1, 4, 2)
            y = self.proj(y.reshape(b, dim, h, w))
            return self.fuse(torch.cat([x, y], 1))

    c = chans
    model = nn.Sequential(
        cbs(3, c[0], 3, 2),
        MV2(c[0], c[1], 1),
        MV2(c[1], c[2], 2),
        MV2(c[2], c[2], 1),
        MV2(c[2], c[2], 1),
        MV2(c[2], c[3], 2),
        MobileViTBlock(c[3], *mv[0]),
        MV2(c[3], c[4], 2),
        MobileViTBlock(c[4], *mv[1]),
        MV2(c[4], c[5], 2),
        MobileViTBlock(c[5], *mv[2]),
        cbs(c[5], last),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(last, classes),
    ).to(device, memory_format=torch.channels_last)
    run = DDP(model, device_ids=_ddp_ids(k, device))
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True} if fixed else {}
    data = PremadeCrops(n, side, classes, 21400 + rank)  # each rank its own shard
    loader = DataLoader(data, batch_size=batch, shuffle=True, drop_last=True, **kw)
    next_batch = uint8_batches(loader, device)

    def loss_fn():
        x, y = next_batch()
        x = x.contiguous(memory_format=torch.channels_last)
        with k.ac:
            logits = run(x)
        return F.cross_entropy(logits.float(), y)

    k.meta["num_workers"] = loader.num_workers
    k.meta["persistent_workers"] = loader.persistent_workers
    k.meta["params"] = sum(q.numel() for q in model.parameters())
    k.meta["memory_format"] = "channels_last"
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v209": _resnest_ddp,
    "v210": _layoutlm_ddp,
    "v211": _mpt_fsdp,
    "v212": _marian_ddp,
    "v213": _stablelm_fsdp,
    "v214": _mobilevit_ddp,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
