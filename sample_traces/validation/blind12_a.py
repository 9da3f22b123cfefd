"""The twelfth blind part's cases v185-v192 (merged by record_blind12.py): eight 2-GPU pairs, each
on a model family no earlier case used. FSDP2's prefetch defeated on a BEiT-style vision
transformer over pre-made image patches (v185) and a BART-style encoder-decoder (v186); DDP's
gradients held in one bucket until the backward ends on an OverFeat-style CNN whose large
classifier's gradients come first in the backward (v187); rank 0 alone logging each attention
head's entropy after the backward of a Synthesizer-style encoder (v188); rank 1 alone making its
log-mel features in the training process for a Jasper-style speech recogniser (v189); a
GPT-J-style decoder in tensor parallel, eager DTensor against torch.compile (v190); and two
pairs chosen to gain nothing: gpuscope's explicit FSDP2 prefetch on a Qwen-style decoder of long
sequences whose all-gathers already hide (v191), and gpuscope's DDP buckets on an RCAN-style
super-resolution net of 1.5 M parameters whose all-reduce is tens of microseconds (v192).

Sizes come from FLOP, byte and launch counts (one comment beside each builder gives its estimate
of one step on an H100 and the gain expected), not from timings: nothing here was run on a GPU
before the part was fixed. The 2-GPU cases recorded before (v170-v172) ran ~1.5-2.5 x their
estimates (v170 ~29 ms estimated, 60-72 ms timed; v171 25-35, 117-133; v172 25, 45), so each
estimate here is aimed at the lower half of 15-60 ms.
"""

from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "multi_gpu"))

from record_common import Kit  # noqa: E402

CASES: dict[str, dict] = {
    "v185": {
        "name": "fsdp_prefetch",
        "model": "BEiT-style vision transformer (256 pre-made patches of 16 x 16 x 3 from 256 x "
        "256 images, linearly embedded; 8 pre-norm layers d 2048, 16 heads of 128 with a "
        "learned relative position bias per layer (961 offsets x 16 heads) added to the "
        "scores, layer scale on both branches, MLP 8192 with GELU; mean-pooled patches, "
        "LayerNorm, 1000 classes; 50 M parameters a layer, 407 M in all) under FSDP2 on 2 GPUs "
        "(fully_shard per layer + root, bf16 parameters, fp32 reduce), 6 images (1536 tokens) "
        "per rank, AdamW(fused=True)",
        "planted": "FSDP2 prefetch defeated: each layer's all-gather waits for the compute "
        "before it (forward and backward), backward prefetch off",
        "fix": "FSDP2's default prefetching",
        "expected_fix": "fsdp_prefetch",
        "gpus": 2,
    },
    "v186": {
        "name": "fsdp_prefetch",
        "model": "BART-style encoder-decoder (vocab 16384, embeddings shared by encoder, "
        "decoder and output; learned positions; 4 + 4 post-norm layers d 2048, 16 heads, "
        "decoder layers with causal self-attention and cross-attention, MLP 8192 with GELU; "
        "50 M parameters an encoder layer, 67 M a decoder layer, 504 M in all) under FSDP2 on "
        "2 GPUs (fully_shard per layer + root, bf16 parameters, fp32 reduce), 4 pairs of 256 "
        "source and 128 target tokens per rank, AdamW(fused=True)",
        "planted": "FSDP2 prefetch defeated: each layer's all-gather waits for the compute "
        "before it (forward and backward), backward prefetch off",
        "fix": "FSDP2's default prefetching",
        "expected_fix": "fsdp_prefetch",
        "gpus": 2,
    },
    "v187": {
        "name": "overlap_communication",
        "model": "OverFeat-style CNN (an 11x11 stride-4 conv 96 ch, max pool, a 5x5 conv 256 "
        "ch, max pool, 3x3 convs 512/1024/1024 ch, max pool to 6 x 6; classifier Linear "
        "36864-4096, 4096-4096, 4096-1000 with ReLU: 172 M of its 188 M parameters) on 231 x "
        "231 images under DDP on 2 GPUs, batch 128 per rank, bf16 autocast, channels_last, "
        "AdamW(fused=True): 750 MB of fp32 gradients, most of them the classifier's, made first "
        "in the backward",
        "planted": "DDP(bucket_cap_mb=4096): one bucket, all-reduced after backward ends",
        "fix": "DDP's defaults (bucket_cap_mb=25): each bucket all-reduced as soon as backward "
        "has made its gradients, the classifier's under the convolutions' backward",
        "expected_fix": "overlap_communication",
        "gpus": 2,
    },
    "v188": {
        "name": "load_imbalance_host",
        "model": "Synthesizer-style encoder (dense synthesizer attention: each head's 256 x 256 "
        "weights made from each token by a two-layer MLP, no query-key product; vocab 8000, "
        "learned positions, 6 pre-norm layers d 768, 12 heads of 64, MLP 3072 with GELU, "
        "token-prediction head) under DDP on 2 GPUs, batch 32 sequences of 256 tokens per "
        "rank, bf16 autocast, AdamW(fused=True)",
        "planted": "rank 0 alone, after backward, logs each attention head's entropy, peak "
        "weight and share of weights over 0.5, head by head over the 72 heads: about 940 small "
        "ops launched one by one, so its host is the pace-setter and rank 1 waits in every "
        "all-reduce",
        "fix": "rank 0's per-head attention logging removed",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
    "v189": {
        "name": "dataloader_workers_straggler",
        "model": "Jasper-style speech recogniser (log-mel 64 x 201 frames of 2 s at 16 kHz; a "
        "stride-2 Conv1d k 11 256 ch, 5 blocks of 5 Conv1d-BatchNorm-ReLU sub-blocks 256/384/"
        "512/640/768 ch, kernels 11/13/17/21/25, a residual 1x1 conv per block; a dilated k 29 "
        "conv 896 ch, 1x1 convs 1024 and to 29 characters; CTC loss) under DDP on 2 GPUs, "
        "batch 32 clips per rank, bf16 autocast, AdamW(fused=True); each clip made in the "
        "Dataset from a synthesised waveform: speed perturbation by resampling, added noise, "
        "pre-emphasis, a 512-point STFT, 64 mel filters, log, per-feature normalisation and "
        "SpecAugment's frequency and time masks",
        "planted": "rank 1 builds its DataLoader with num_workers=0 (rank 0 with 4 workers): "
        "rank 1 makes its 32 clips' features in the training process each step, so it is the "
        "pace-setter and rank 0 waits in every all-reduce",
        "fix": "rank 1's DataLoader with the same 4 workers (persistent_workers=True) as rank 0",
        "expected_fix": "dataloader_workers",
        "gpus": 2,
    },
    "v190": {
        "name": "dtensor_dispatch",
        "model": "GPT-J-style decoder LM (vocab 8192, untied head with bias; 3 layers d 512, "
        "one LayerNorm feeding attention and MLP in parallel, 8 heads of 64 with rotary on "
        "half of each head, causal scaled_dot_product_attention, MLP 2048 with GELU), batch 8 "
        "x 256 tokens, bf16 autocast, tensor parallel on 2 GPUs (parallelize_module per layer: "
        "q, k, v, fc_in column-wise; out, fc_out row-wise)",
        "planted": "eager: DTensor's Python dispatch for each sharded op of 18 small Linears, "
        "forward and backward",
        "fix": "torch.compile(model) after parallelize_module",
        "expected_fix": "dtensor_dispatch",
        "gpus": 2,
        "compiled": True,
    },
    "v191": {
        "name": "null_fsdp_prefetch",
        "model": "Qwen-style decoder LM (vocab 32000, untied head; 6 pre-norm layers d 1024 "
        "with RMSNorm, 16 heads of 64 with q, k and v biases, rotary positions, causal "
        "scaled_dot_product_attention, SwiGLU MLP 2816; 12.8 M parameters a layer, 143 M in "
        "all) under FSDP2 on 2 GPUs (fully_shard per layer + root, bf16 parameters, fp32 "
        "reduce), 2 sequences of 4096 tokens per rank, AdamW(fused=True): long attention and "
        "8192-row matmuls beside 13 MB all-gathers",
        "planted": "FSDP2's default prefetching",
        "fix": "gpuscope's fsdp_prefetch code: set_modules_to_forward_prefetch([next]) and "
        "set_modules_to_backward_prefetch([prev]) over the layers (gains ~0: FSDP2 already "
        "gathers the next layer during this one, and each layer's ~0.1 ms all-gather hides "
        "under its ~2 ms of compute)",
        "expected_fix": "fsdp_prefetch",
        "gpus": 2,
        "null": True,
    },
    "v192": {
        "name": "null_overlap_communication",
        "model": "RCAN-style super-resolution net (residual channel attention network: a 3x3 "
        "conv to 64 ch, 4 residual groups of 4 residual channel-attention blocks (two 3x3 "
        "convs, global average pool, 1x1 convs 64-4-64, sigmoid gate) and a 3x3 conv each, a "
        "3x3 conv, a 3x3 conv to 256 ch, PixelShuffle 2x, a 3x3 conv to 3 ch; 1.5 M "
        "parameters; L1 loss) on 96 x 96 patches upscaled to 192 x 192, under DDP on 2 GPUs, "
        "batch 24 per rank, bf16 autocast, channels_last, AdamW(fused=True): a long "
        "convolution step beside 6 MB of gradients",
        "planted": "DDP's defaults (bucket_cap_mb=25)",
        "fix": "gpuscope's overlap code: DDP(bucket_cap_mb=50, gradient_as_bucket_view=True, "
        "static_graph=True) (gains ~0: the 6 MB of fp32 gradients are all-reduced in tens of "
        "microseconds, in two buckets either way)",
        "expected_fix": "overlap_communication",
        "gpus": 2,
        "null": True,
    },
}


def _rotary(torch, seq: int, dims: int, device: str):
    """cos and sin (seq, dims / 2) of rotary position embeddings over ``dims`` head dims."""
    inv = 1.0 / 10000 ** (torch.arange(0, dims, 2, dtype=torch.float32) / dims)
    ang = torch.arange(seq, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos().to(device), ang.sin().to(device)


def _rope(torch, x, cos, sin):
    """``x`` (b, heads, t, hd) with its first ``2 cos.shape[-1]`` dims rotated (the rest kept)."""
    r = 2 * cos.shape[-1]
    a, b, rest = x[..., : r // 2], x[..., r // 2 : r], x[..., r:]
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([a * c - b * s, b * c + a * s, rest], -1)


def _shard(k: Kit, model, blocks, fixed: bool, planted_how: str) -> str:
    """FSDP2 over ``model``: ``fully_shard`` per block and the root, bf16 parameters, fp32
    reduce. ``planted_how``: what the planted variant changes: ``defeat`` (every all-gather waits
    for the compute before it: record_multi_gpu.defeat_prefetch) or ``default`` (the planted
    variant keeps FSDP2's defaults and the fixed one sets gpuscope's explicit prefetch, one block
    ahead forward and back). Returns how, for the record."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=k.torch.bfloat16, reduce_dtype=k.torch.float32)
    for blk in blocks:
        fully_shard(blk, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    how = "fully_shard per layer + root, bf16 params, fp32 reduce"
    if planted_how == "defeat" and not fixed:
        from record_multi_gpu import defeat_prefetch

        how += "; " + defeat_prefetch(model, list(blocks))
    if planted_how == "default" and fixed:  # gpuscope's fsdp_prefetch code, as it reads
        for cur, nxt in pairwise(blocks):  # zip(model.layers, model.layers[1:])
            cur.set_modules_to_forward_prefetch([nxt])
        for prev, cur in pairwise(blocks):  # zip(model.layers[1:], model.layers)
            cur.set_modules_to_backward_prefetch([prev])
        how += "; explicit prefetch: forward [next], backward [prev]"
    return how


def _beit_fsdp(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # Per rank 1536 tokens. A layer of 50.4 M parameters (12 d^2): forward 2 x 1536 x 50.4 M =
    # 0.15 TFLOP (~0.4 ms at ~400 TFLOP/s on 1536-row GEMMs), backward ~0.8 ms, attention with
    # the bias (96 batch-heads x 256 x 256, memory-efficient kernel) ~0.1 ms. Its bf16
    # all-gather (each rank receives 50 MB: ~0.2 ms at ~240 GB/s, ~0.27 ms with the copy-in)
    # runs twice a step (forward, and again in the backward: reshard after forward); its fp32
    # reduce-scatter 100 MB each way (~0.45 ms), under the backward. Planted, both all-gathers
    # of each layer are exposed: ~0.45 + 0.27 + 0.27 + 0.9 = 1.9 ms a layer, 15 ms for 8;
    # fixed, they hide under the compute: ~1.4 ms a layer, 11 ms. Both: FSDP2's casts and
    # copies in and out (~20 bytes a parameter, 407 M: ~3 ms), fused AdamW over 204 M fp32 local
    # parameters (~5.7 GB, ~2 ms), the root's patch embedding, head and its exposed all-gather
    # (~0.5 ms): planted ~21 ms, fixed ~17 ms, ~18 % off (v170's pattern at 3/4 of its size:
    # v170 timed 60-72 ms planted, 13-24 % off)
    patch, d, heads, hid, layers, side, batch, classes = (
        (12, 32, 4, 64, 2, 4, 2, 10) if k.quick else (768, 2048, 16, 8192, 8, 16, 6, 1000)
    )
    hd, tokens = d // heads, side * side
    # BEiT's relative position index: (dy, dx) of every query-key pair, each in -(side-1)..side-1
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    coords = torch.stack([ys.flatten(), xs.flatten()])  # (2, tokens)
    rel = coords[:, :, None] - coords[:, None, :] + side - 1
    index = (rel[0] * (2 * side - 1) + rel[1]).to(device)  # (tokens, tokens)
    offsets = (2 * side - 1) ** 2

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.rel_bias = nn.Parameter(torch.zeros(offsets, heads))
            self.fc1, self.fc2 = nn.Linear(d, hid), nn.Linear(hid, d)
            self.g1 = nn.Parameter(torch.full((d,), 0.1))  # layer scale
            self.g2 = nn.Parameter(torch.full((d,), 0.1))
            self.gate = None  # set by defeat_prefetch (planted)

        def forward(self, x):
            if self.gate is not None:
                x = self.gate.apply(x)  # backward: the layer below's all-gather waits
            b, t, _ = x.shape
            q, kk, v = self.qkv(self.n1(x)).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            bias = self.rel_bias[index].permute(2, 0, 1).to(q.dtype)  # (heads, t, t)
            a = F.scaled_dot_product_attention(q, kk, v, attn_mask=bias)
            x = x + self.g1 * self.o(a.transpose(1, 2).reshape(b, t, d))
            x = x + self.g2 * self.fc2(F.gelu(self.fc1(self.n2(x))))
            if self.gate is not None and x.is_cuda:
                self.gate.wait()  # forward: the next layer's all-gather waits for this one
            return x

    class BEiT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(patch, d)
            self.blocks = nn.ModuleList([Layer() for _ in range(layers)])
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, patches):
            x = self.embed(patches)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.norm(x.mean(1)))  # mean-pooled patches

    with torch.device(device):
        model = BEiT()
    how = _shard(k, model, list(model.blocks), fixed, "defeat")
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(185 + rank)
    patches = torch.randn(batch, tokens, patch, generator=gen).to(device)
    labels = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        return F.cross_entropy(model(patches).float(), labels)

    k.meta["fsdp"] = how
    k.meta["prefetch"] = "default" if fixed else "defeated"
    k.meta["params"] = sum(p.numel() for p in model.parameters())  # DTensor: global
    k.meta["tokens_per_rank"] = batch * tokens
    return k.train(opt, loss_fn), batch, model


def _bart_fsdp(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # Per rank 1024 source and 512 target tokens. An encoder layer (50.4 M): forward 2 x 1024
    # x 50.4 M = 0.10 TFLOP, ~0.27 ms; a decoder layer (67 M: self-attention, cross-attention
    # whose keys and values come from the 1024 source tokens, MLP): ~0.08 TFLOP forward, ~0.22
    # ms; backward ~2 x. Their bf16 all-gathers (each rank receives 50 / 67 MB, ~0.27 / 0.35
    # ms with the copy-in) twice a step, the fp32 reduce-scatters (~0.45 / 0.6 ms) under the
    # backward. Planted, every all-gather is exposed: ~0.27 + 0.54 + 0.6 = 1.4 ms an encoder
    # layer, ~0.22 + 0.7 + 0.6 = 1.5 ms a decoder layer (its backward bound by its reduce-
    # scatter), ~11.6 ms for the 8; fixed, the forward all-gathers hide under the layer before
    # (or show their excess over it, ~0.1 ms a decoder layer) and the backward ones under the
    # reduce-scatters: ~0.9-1.0 ms a layer, ~7.6 ms. Both: FSDP2's copies (~20 bytes a
    # parameter, 504 M: ~3.5 ms), fused AdamW over 252 M fp32 local parameters (~2.3 ms), the
    # root's shared embedding and output (16384 x 2048) with its exposed all-gather and the
    # fp32 logits (~1.5 ms): planted ~19 ms, fixed ~15 ms, ~20 % off
    vocab, d, heads, hid, enc_layers, dec_layers, src, tgt, batch = (
        (256, 32, 4, 64, 2, 2, 16, 8, 2) if k.quick else (16384, 2048, 16, 8192, 4, 4, 256, 128, 4)
    )
    hd = d // heads

    def attend(q_lin, kv_lin, o_lin, x, mem, causal: bool):
        b, t, _ = x.shape
        q = q_lin(x).view(b, t, heads, hd).transpose(1, 2)
        kk, v = kv_lin(mem).view(b, mem.shape[1], 2, heads, hd).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, kk, v, is_causal=causal)
        return o_lin(a.transpose(1, 2).reshape(b, t, d))

    class EncoderLayer(nn.Module):  # post-norm, as BART
        def __init__(self) -> None:
            super().__init__()
            self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, hid), nn.Linear(hid, d)
            self.gate = None  # set by defeat_prefetch (planted)

        def forward(self, x):
            if self.gate is not None:
                x = self.gate.apply(x)
            x = self.n1(x + attend(self.q, self.kv, self.o, x, x, False))
            x = self.n2(x + self.fc2(F.gelu(self.fc1(x))))
            if self.gate is not None and x.is_cuda:
                self.gate.wait()
            return x

    class DecoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
            self.cq, self.ckv, self.co = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
            self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, hid), nn.Linear(hid, d)
            self.gate = None

        def forward(self, x, mem):
            if self.gate is not None:
                x = self.gate.apply(x)
            x = self.n1(x + attend(self.q, self.kv, self.o, x, x, True))
            x = self.n2(x + attend(self.cq, self.ckv, self.co, x, mem, False))
            x = self.n3(x + self.fc2(F.gelu(self.fc1(x))))
            if self.gate is not None and x.is_cuda:
                self.gate.wait()
            return x

    class BART(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)  # shared: encoder, decoder, output
            self.enc_pos, self.dec_pos = nn.Embedding(src, d), nn.Embedding(tgt, d)
            self.enc_norm, self.dec_norm = nn.LayerNorm(d), nn.LayerNorm(d)
            self.encoder = nn.ModuleList([EncoderLayer() for _ in range(enc_layers)])
            self.decoder = nn.ModuleList([DecoderLayer() for _ in range(dec_layers)])

        def forward(self, source, target):
            x = self.enc_norm(self.tok(source) + self.enc_pos.weight[: source.shape[1]])
            for layer in self.encoder:
                x = layer(x)
            y = self.dec_norm(self.tok(target) + self.dec_pos.weight[: target.shape[1]])
            for layer in self.decoder:
                y = layer(y, x)
            return F.linear(y, self.tok.weight)  # tied output

    with torch.device(device):
        model = BART()
    how = _shard(k, model, [*model.encoder, *model.decoder], fixed, "defeat")
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(186 + rank)
    original = torch.randint(4, vocab, (batch, tgt + 1), generator=gen)
    source = torch.randint(4, vocab, (batch, src), generator=gen)
    source[:, : tgt + 1] = original  # the text, then its context
    noised = torch.rand(batch, src, generator=gen) < 0.3
    source = source.masked_fill(noised, 3).to(device)  # <mask> = 3: BART's text infilling
    original = original.to(device)

    def loss_fn():
        logits = model(source, original[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), original[:, 1:].reshape(-1))

    k.meta["fsdp"] = how
    k.meta["prefetch"] = "default" if fixed else "defeated"
    k.meta["params"] = sum(p.numel() for p in model.parameters())  # DTensor: global
    k.meta["tokens_per_rank"] = batch * (src + tgt)
    return k.train(opt, loss_fn), batch, model


def _ddp_ids(k: Kit, device: str):
    """DDP's ``device_ids`` on this rank: its GPU, or None on the CPU."""
    return [k.torch.device(device).index] if k.cuda else None


def _overfeat_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # Per image: conv1 56 x 56 x 96 x 363 MACs 0.22 GFLOP, conv2 24 x 24 x 256 x 2400 0.71,
    # conv3-5 at 12 x 12: 0.34 + 1.36 + 2.72, the classifier 0.35: ~5.7 GFLOP forward, ~17 a
    # step; batch 128: 2.2 TFLOP of bf16 convs and GEMMs, ~8-9 ms at ~250 TFLOP/s, ReLU/pool
    # traffic ~1 ms: ~10 ms on the GPU, of which the convolutions' backward ~5-6 ms comes
    # after the classifier's (~0.3 ms). 188 M parameters: 750 MB of fp32 gradients, the
    # classifier's 690 MB made first in the backward; the all-reduce at ~350-400 GB/s over
    # NVLink ~2-2.2 ms, DDP's copies into the bucket and out ~0.8 ms; fused AdamW over 188 M
    # (~5 GB) ~1.7 ms. Planted, the 4 GB bucket (after DDP's first bucket of 1 MB, the last
    # Linear's bias and weight) waits for the whole backward, then its all-reduce runs alone:
    # ~10 + 2.2 + 0.8 + 1.7 = ~14.7 ms; fixed, the classifier's buckets are all-reduced under
    # the convolutions' backward (~5 ms against ~2 ms of all-reduce; ~0.3 ms of tail, the
    # convs' last 25 MB bucket): ~12.3 ms, ~15-18 % off
    img, chans, fc, classes, batch = (
        (71, (8, 16, 16, 16, 16), 32, 10, 4)
        if k.quick
        else (231, (96, 256, 512, 1024, 1024), 4096, 1000, 128)
    )
    side = (((img - 11) // 4 + 1) // 2 - 4) // 2 // 2  # conv1 /4, pool, conv2 valid, pool, pool
    c1, c2, c3, c4, c5 = chans
    model = nn.Sequential(
        nn.Conv2d(3, c1, 11, 4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c2, c3, 3, 1, 1),
        nn.ReLU(),
        nn.Conv2d(c3, c4, 3, 1, 1),
        nn.ReLU(),
        nn.Conv2d(c4, c5, 3, 1, 1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(c5 * side * side, fc),
        nn.ReLU(),
        nn.Linear(fc, fc),
        nn.ReLU(),
        nn.Linear(fc, classes),
    ).to(device, memory_format=torch.channels_last)
    kw = {} if fixed else {"bucket_cap_mb": 4096}
    run = DDP(model, device_ids=_ddp_ids(k, device), **kw)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(187 + rank)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        with k.ac:
            logits = run(x)
        return F.cross_entropy(logits.float(), y)

    k.meta["ddp"] = kw or "defaults (bucket_cap_mb=25)"
    k.meta["grad_bytes"] = 4 * sum(p.numel() for p in model.parameters())
    return k.train(opt, loss_fn), batch, model


def _synthesizer_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # Per rank 8192 tokens. A layer: 11 d^2 = 6.5 M parameters of matmuls (the synthesizer's
    # first Linear, v, o, MLP) plus the per-head 64 -> 256 weight makers: 6 x 8192 x 6.5 M +
    # 6 x 8192 x 12 x 64 x 256 x 2 (weights made, then applied to v) = 0.34 TFLOP, ~0.9 ms; the
    # weights' softmax over 32 x 12 x 256 x 256 (25 M) ~4 passes forward and back, ~0.4 ms:
    # ~1.3 ms a layer, 8 ms for 6, with the 8000-token head, the embeddings and fused AdamW
    # over 52 M parameters: ~10 ms on the GPU against ~450 kernels (~6-8 ms of host), DDP's
    # 208 MB all-reduce under the backward. Planted, rank 0 then logs 72 heads x 13 ops
    # (entropy: clamp, log, mul, sum, neg, mean; peak: amax, mean; share over 0.5: gt, float,
    # mean; into the log row: stack, copy) = ~940 launches, ~11-14 ms of host at ~12-15 us,
    # after its backward's launches and before its optimizer's: its host is ahead of its GPU by
    # only the ~2-4 ms the step leaves, so its step grows to ~18-20 ms and rank 1 waits in the
    # next all-reduce. Fixed ~10-11 ms: ~40-45 % off (v114's per-class counts, ~2800 ops on a
    # 78 ms step, took 23 %)
    vocab, d, heads, layers, seq, batch = (
        (256, 32, 4, 2, 16, 2) if k.quick else (8000, 768, 12, 6, 256, 32)
    )
    hd = d // heads

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.synth = nn.Linear(d, d)  # the first layer of each head's weight maker
            self.make = nn.Parameter(torch.randn(heads, hd, seq) * hd**-0.5)  # its second
            self.v, self.o = nn.Linear(d, d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.last = None  # the attention weights of the latest forward (detached)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.n1(x)
            s = F.relu(self.synth(h)).view(b, t, heads, hd).transpose(1, 2)  # (b, H, t, hd)
            p = torch.softmax(s @ self.make[None, :, :, :t], -1)  # (b, H, t, t): no q.k
            self.last = p.detach()
            v = self.v(h).view(b, t, heads, hd).transpose(1, 2)
            x = x + self.o((p @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.n2(x))))

    class Synthesizer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, ids):
            x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))

    model = Synthesizer().to(device)
    run = DDP(model, device_ids=_ddp_ids(k, device))
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(188 + rank)
    target = torch.randint(5, vocab, (batch, seq), generator=gen)
    masked = torch.rand(batch, seq, generator=gen) < 0.15
    ids = target.masked_fill(masked, 4).to(device)  # [MASK] = 4
    target = target.to(device)
    log = torch.zeros(layers, heads, 3, device=device)  # entropy, peak, share over 0.5
    logs = rank == 0 and not fixed

    def step():
        with k.ac:
            logits = run(ids)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), target.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if logs:  # planted, rank 0: each head's attention statistics, one by one
            with torch.no_grad():
                for i, layer in enumerate(model.layers):
                    for h in range(heads):
                        p = layer.last[:, h].float()
                        ent = (-(p * p.clamp_min(1e-9).log()).sum(-1)).mean()
                        peak = p.amax(-1).mean()
                        share = (p > 0.5).float().mean()
                        log[i, h].copy_(torch.stack([ent, peak, share]))
        opt.step()

    k.meta["extra_host_work_rank"] = 0
    k.meta["head_logging"] = "none" if fixed else "head by head on rank 0"
    k.meta["heads_logged"] = layers * heads if logs else 0  # on this rank
    return step, batch, model


class SpeechClips:
    """v189's dataset: ``n`` clips of ``secs`` seconds at 16 kHz, clip ``i`` of shard ``shard`` made
    per call from its own seed (the same whichever process makes it): a waveform of a few
    harmonics of a gliding pitch with noise, speed-perturbed by linear resampling (0.9-1.1 x),
    mixed with noise at a random level, pre-emphasised, a 512-point STFT (hop 160, Hann), the
    power through ``mels`` triangular mel filters, log, normalised per mel band, then
    SpecAugment's two frequency masks (<= 8 bands) and two time masks (<= 20 frames). Returns
    (features (mels, frames), the ``chars`` character targets)."""

    def __init__(self, n: int, secs: float, mels: int, chars: int, shard: int) -> None:
        import torch

        self.n, self.len, self.chars, self.shard = n, int(16000 * secs), chars, shard
        self.window = torch.hann_window(512)
        fft = torch.linspace(0, 8000, 257)
        mel = 2595 * torch.log10(1 + fft / 700)
        edges = torch.linspace(0, float(mel[-1]), mels + 2)
        lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
        up, down = (mel - lo) / (mid - lo), (hi - mel) / (hi - mid)
        self.filters = up.minimum(down).clamp_min(0)  # (mels, 257)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch
        import torch.nn.functional as F

        g = torch.Generator().manual_seed(18900 + 2 * i + self.shard)
        n = self.len
        t = torch.arange(n, dtype=torch.float32) / 16000
        f0 = 100 + 150 * torch.rand(1, generator=g) + 40 * torch.sin(2 * torch.pi * 0.7 * t)
        phase = 2 * torch.pi * torch.cumsum(f0, 0) / 16000
        wave = sum(torch.sin(h * phase) / h for h in (1, 2, 3, 4))
        wave = wave * (0.5 + 0.5 * torch.sin(2 * torch.pi * 2.3 * t))  # syllable envelope
        rate = 0.9 + 0.2 * float(torch.rand(1, generator=g))  # speed perturbation
        wave = F.interpolate(wave[None, None], scale_factor=1 / rate, mode="linear")[0, 0]
        wave = F.pad(wave, (0, max(0, n - wave.numel())))[:n]
        wave = wave + float(torch.rand(1, generator=g)) * 0.1 * torch.randn(n, generator=g)
        wave = torch.cat([wave[:1], wave[1:] - 0.97 * wave[:-1]])  # pre-emphasis
        spec = torch.stft(wave, 512, 160, window=self.window, return_complex=True)
        feats = (self.filters @ spec.abs().pow(2)).clamp_min(1e-10).log()
        feats = (feats - feats.mean(1, keepdim=True)) / (feats.std(1, keepdim=True) + 1e-5)
        mels, frames = feats.shape
        for _ in range(2):  # SpecAugment
            w = int(torch.randint(0, 9, (1,), generator=g))
            f = int(torch.randint(0, mels - w + 1, (1,), generator=g))
            feats[f : f + w] = 0
            w = int(torch.randint(0, 21, (1,), generator=g))
            s = int(torch.randint(0, frames - w + 1, (1,), generator=g))
            feats[:, s : s + w] = 0
        return feats, torch.randint(1, 29, (self.chars,), generator=g)


def _jasper_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    torch, nn, F = k.torch, k.nn, k.F
    # Jasper 5x5: 167 M parameters (the blocks' 5 sub-blocks 3.6/8.9/21.2/41.3/71.3 M, the
    # epilogue's k 29 conv 20 M), each weight a MAC per frame after the stride-2 prologue (101
    # frames a clip): ~334 MFLOP a frame forward; 3232 frames a rank: 1.08 TFLOP, ~3.2 a step
    # of bf16 Conv1d, ~16 ms at ~200 TFLOP/s; BatchNorm/ReLU/residual traffic ~1.5 ms, fused
    # AdamW over 167 M parameters ~1.5 ms, DDP's 670 MB all-reduce under the backward: ~19-20
    # ms on the GPU, ~350 kernels. Loading: 1.2-2.3 ms a clip on the 2-core CPU this was
    # written on (timed there: the mel filters, the waveform's synthesis, the interpolation and
    # the STFT most of it), ~40-75 ms a batch of 32. Planted, rank 1 makes its batch in the
    # training process (one intra-op thread under torchrun) before each forward, its GPU idle
    # but for the ~2 ms its queue holds: ~60-90 ms a step, rank 0 waiting in the all-reduce;
    # fixed, 4 workers a rank each make a batch in ~40-75 ms, 4 in flight (~10-19 ms a batch,
    # under the ~20 ms step): ~20-21 ms, ~65-75 % off (v158's rank-1 loading: 47-54 %)
    mels, secs, chans, kernels, clips, batch, workers = (
        (16, 0.25, (8, 8, 8, 8, 8), (3, 3, 3, 3, 3), 16, 2, 2)
        if k.quick
        else (64, 2.0, (256, 384, 512, 640, 768), (11, 13, 17, 21, 25), 4096, 32, 4)
    )
    pro, epi, top, chars = (8, 8, 8, 6) if k.quick else (256, 896, 1024, 30)
    data = SpeechClips(clips, secs, mels, chars, rank)

    def cbr(ci: int, co: int, ks: int, stride: int = 1, dil: int = 1) -> list:
        pad = dil * (ks // 2)
        return [nn.Conv1d(ci, co, ks, stride, pad, dil, bias=False), nn.BatchNorm1d(co)]

    class Block(nn.Module):  # 5 sub-blocks, the residual 1x1 conv added before the last ReLU
        def __init__(self, ci: int, co: int, ks: int) -> None:
            super().__init__()
            body = [*cbr(ci, co, ks)]
            for _ in range(4):
                body += [nn.ReLU(), *cbr(co, co, ks)]
            self.body = nn.Sequential(*body)
            self.res = nn.Sequential(*cbr(ci, co, 1))

        def forward(self, x):
            return F.relu(self.body(x) + self.res(x))

    mods: list = [*cbr(mels, pro, 11, 2), nn.ReLU()]
    ci = pro
    for co, ks in zip(chans, kernels, strict=True):
        mods.append(Block(ci, co, ks))
        ci = co
    mods += [*cbr(ci, epi, 29, 1, 2), nn.ReLU(), *cbr(epi, top, 1), nn.ReLU()]
    mods.append(nn.Conv1d(top, 29, 1))  # 28 characters and the CTC blank (0)
    model = nn.Sequential(*mods).to(device)
    run = DDP(model, device_ids=_ddp_ids(k, device))
    opt = k.adamw(model, fused=k.cuda)
    by_rank = [workers, workers] if fixed else [workers, 0]
    kw = {"num_workers": workers, "persistent_workers": True} if by_rank[rank] else {}
    loader = DataLoader(data, batch_size=batch, drop_last=True, **kw)
    state = {"it": iter(loader)}

    def next_batch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            return next(state["it"])

    def loss_fn():
        feats, targets = (t.to(device, non_blocking=True) for t in next_batch())
        with k.ac:
            logits = run(feats)  # (b, 29, frames)
        logp = logits.float().log_softmax(1).permute(2, 0, 1)  # (frames, b, 29)
        frames = torch.full((feats.shape[0],), logp.shape[0], dtype=torch.long)
        lengths = torch.full((feats.shape[0],), chars, dtype=torch.long)
        return F.ctc_loss(logp, targets, frames, lengths)

    k.meta["num_workers"] = by_rank[rank]
    k.meta["num_workers_by_rank"] = by_rank
    k.meta["extra_work_rank"] = 1
    k.meta["clip_seconds"] = secs
    return k.train(opt, loss_fn), batch, model


def _gptj_tp(k: Kit, fixed: bool, device: str, rank: int):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch, nn, F = k.torch, k.nn, k.F
    # Per rank 2048 tokens, d 512 split in 2 (4 heads a rank): every matmul ~1-4 GFLOP, the GPU
    # work of a step ~1-2 ms (~200 small kernels). Eager, each of the 18 parallelized Linears
    # (6 a layer) goes through DTensor's Python dispatch forward (from_local, the sharded
    # mm/addmm, to_local, the row-wise all-reduce) and again for its backward ops and its
    # optimizer update (foreach AdamW dispatched by DTensor). v171 (48 such Linears, a bigger
    # plain-op count) timed 117-133 ms eager, ~2.5 ms a Linear with its share of the rest: here
    # ~18 x 1.8 ms + ~150 plain ops (~4 ms) = ~35-45 ms, host-bound. torch.compile after
    # parallelize_module traces the DTensor ops once: forward and backward a few fused kernels
    # and the 6 all-reduces (~2-3 ms), the loss and the optimizers eager as planted (~8-10 ms,
    # v171's compiled 46 ms for 48 Linears' worth of DTensor parameters): ~12-15 ms, ~60-70 %
    # off (v171: 60-65 %)
    vocab, d, heads, layers, seq, batch = (
        (256, 32, 4, 2, 16, 2) if k.quick else (8192, 512, 8, 3, 256, 8)
    )
    hd = d // heads
    world = dist.get_world_size() if dist.is_initialized() else 1
    cos, sin = _rotary(torch, seq, hd // 2, device)  # rotary on half of each head

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.q = nn.Linear(d, d, bias=False)
            self.k = nn.Linear(d, d, bias=False)
            self.v = nn.Linear(d, d, bias=False)
            self.out = nn.Linear(d, d, bias=False)
            self.fc_in, self.fc_out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.ln(x)
            q, kk, v = (m(h).view(b, t, -1, hd).transpose(1, 2) for m in (self.q, self.k, self.v))
            q, kk = _rope(torch, q, cos, sin), _rope(torch, kk, cos, sin)
            a = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
            attn = self.out(a.transpose(1, 2).reshape(b, t, -1))
            return x + attn + self.fc_out(F.gelu(self.fc_in(h)))  # parallel block

    class GPTJ(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, vocab)  # untied, with a bias, as GPT-J's

        def forward(self, idx):
            x = self.wte(idx)
            for layer in self.layers:
                x = layer(x)
            return self.lm_head(self.ln_f(x))

    model = GPTJ().to(device)
    mesh = init_device_mesh(k.dt, (world,))
    plan = {
        **{m: ColwiseParallel() for m in ("q", "k", "v", "fc_in")},
        "out": RowwiseParallel(),
        "fc_out": RowwiseParallel(),
    }
    for layer in model.layers:
        parallelize_module(layer, mesh, plan)
    run = torch.compile(model) if fixed else model
    # foreach kernels cannot mix DTensors and plain tensors: one AdamW each
    groups = [[p for p in model.parameters() if isinstance(p, DTensor) == s] for s in (True, False)]
    opts = [torch.optim.AdamW(g, lr=1e-4) for g in groups if g]
    gen = torch.Generator().manual_seed(190)  # the same batch on both ranks (tensor parallel)
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

    def step():
        with k.ac:
            logits = run(idx[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in opts:
            o.step()

    k.meta["compiled"] = fixed
    k.meta["parallelized_linears"] = len(plan) * layers
    k.meta["tp_world"] = world
    return step, batch, model


def _qwen_fsdp(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # Per rank 8192 tokens. A layer of 12.8 M parameters: 6 x 8192 x 12.8 M = 0.63 TFLOP of
    # bf16 matmuls (8192-row GEMMs, ~1.3 ms at ~500 TFLOP/s), causal flash attention over 2 x
    # 16 heads x 4096^2 ~0.24 TFLOP forward and back (~0.6 ms), RMSNorm/rotary/SwiGLU traffic
    # ~0.2 ms: ~2.1 ms a layer, 12.6 ms for 6; the root's untied embedding and head (2 x 32.8
    # M; 6 x 8192 x 32.8 M = 1.6 TFLOP, ~3.3 ms) and the fp32 logits' loss (1 GB, ~1 ms);
    # FSDP2's copies (~20 bytes a parameter, 143 M: ~1 ms), fused AdamW over 72 M local
    # parameters (~0.4 ms): ~18-19 ms. Each layer's all-gather (each rank receives 12.8 MB,
    # ~0.06-0.1 ms) and fp32 reduce-scatter (~0.15 ms) are 5-10 % of its compute: FSDP2's
    # default (forward: the next layer's all-gather issued as this one starts; backward: the
    # previous layer's) hides them already, and gpuscope's explicit prefetch one layer ahead
    # issues the same all-gathers in the same places: ~0 %, the root's exposed all-gather of
    # 65 MB (~0.3 ms) the same in both
    vocab, d, heads, hid, layers, seq, batch = (
        (256, 32, 4, 64, 3, 16, 2) if k.quick else (32000, 1024, 16, 2816, 6, 4096, 2)
    )
    hd = d // heads
    cos, sin = _rotary(torch, seq, hd, device)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
            self.qkv = nn.Linear(d, 3 * d)  # q, k and v with biases, as Qwen's
            self.o = nn.Linear(d, d, bias=False)
            self.wg = nn.Linear(d, hid, bias=False)
            self.wu = nn.Linear(d, hid, bias=False)
            self.wd = nn.Linear(hid, d, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(self.n1(x)).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            q, kk = _rope(torch, q, cos, sin), _rope(torch, kk, cos, sin)
            a = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            h = self.n2(x)
            return x + self.wd(F.silu(self.wg(h)) * self.wu(h))

    class Qwen(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList([Layer() for _ in range(layers)])
            self.norm = nn.RMSNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))

    with torch.device(device):
        model = Qwen()
    how = _shard(k, model, list(model.layers), fixed, "default")
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(191 + rank)
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

    def loss_fn():
        logits = model(idx[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

    k.meta["fsdp"] = how
    k.meta["prefetch"] = "explicit" if fixed else "default"
    k.meta["params"] = sum(p.numel() for p in model.parameters())  # DTensor: global
    k.meta["tokens_per_rank"] = batch * seq
    return k.train(opt, loss_fn), batch, model


def _rcan_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # Per 96 x 96 patch (9216 pixels): 37 3x3 convs 64 -> 64 (16 blocks x 2, 4 group tails, the
    # body's) 2 x 9216 x 36.9 K x 37 = 25 GFLOP, the upsampler's conv to 256 ch 2.7 and the
    # last conv at 192 x 192 0.13: ~28 GFLOP forward, ~84 a step; batch 24: 2.0 TFLOP of bf16
    # convs at 64 channels (~150 TFLOP/s: ~13 ms); the activations (24 x 64 x 9216 bf16, 28
    # MB) read and written ~24 times a block forward and back (ReLU, the channel attention's
    # pool and gate, the residuals): ~11 GB, ~4 ms: ~17-18 ms, ~700 kernels (~7 ms of host),
    # GPU-bound. 1.5 M parameters: 6 MB of fp32 gradients; DDP's default buckets (the first of
    # 1 MB, the rest in one of 25 MB) and gpuscope's (1 MB, then 50 MB) are the same two, the
    # second all-reduced after the head conv's gradient, the backward's last: ~30-50 us either
    # way; static_graph and the gradients as bucket views save a 6 MB copy (~5 us): ~0 %
    ch, groups, blocks, red, lr, batch = (8, 2, 2, 2, 8, 2) if k.quick else (64, 4, 4, 16, 96, 24)
    batch *= k.batch_scale  # 4 under v192b (record_blind12.FIRST_FIXES)

    class RCAB(nn.Module):  # residual channel-attention block
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(ch, ch, 3, 1, 1), nn.Conv2d(ch, ch, 3, 1, 1)
            self.down, self.up = nn.Conv2d(ch, ch // red, 1), nn.Conv2d(ch // red, ch, 1)

        def forward(self, x):
            h = self.c2(F.relu(self.c1(x)))
            a = torch.sigmoid(self.up(F.relu(self.down(F.adaptive_avg_pool2d(h, 1)))))
            return x + h * a

    class Group(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.Sequential(*[RCAB() for _ in range(blocks)])
            self.tail = nn.Conv2d(ch, ch, 3, 1, 1)

        def forward(self, x):
            return x + self.tail(self.blocks(x))

    class RCAN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Conv2d(3, ch, 3, 1, 1)
            self.body = nn.Sequential(*[Group() for _ in range(groups)])
            self.body_tail = nn.Conv2d(ch, ch, 3, 1, 1)
            self.up = nn.Sequential(nn.Conv2d(ch, 4 * ch, 3, 1, 1), nn.PixelShuffle(2))
            self.out = nn.Conv2d(ch, 3, 3, 1, 1)

        def forward(self, x):
            h = self.head(x)
            return self.out(self.up(h + self.body_tail(self.body(h))))

    model = RCAN().to(device, memory_format=torch.channels_last)
    kw = {"bucket_cap_mb": 50, "gradient_as_bucket_view": True, "static_graph": True}
    kw = kw if fixed else {}
    run = DDP(model, device_ids=_ddp_ids(k, device), **kw)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(192 + rank)
    hr = torch.rand(batch, 3, 2 * lr, 2 * lr, generator=gen)
    low = F.avg_pool2d(hr, 2)  # the low-resolution input: the target's 2 x 2 means
    low = low.to(device).contiguous(memory_format=torch.channels_last)
    hr = hr.to(device).contiguous(memory_format=torch.channels_last)

    def loss_fn():
        with k.ac:
            sr = run(low)
        return F.l1_loss(sr.float(), hr)

    k.meta["ddp"] = kw or "defaults (bucket_cap_mb=25)"
    k.meta["grad_bytes"] = 4 * sum(p.numel() for p in model.parameters())
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v185": _beit_fsdp,
    "v186": _bart_fsdp,
    "v187": _overfeat_ddp,
    "v188": _synthesizer_ddp,
    "v189": _jasper_ddp,
    "v190": _gptj_tp,
    "v191": _qwen_fsdp,
    "v192": _rcan_ddp,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
