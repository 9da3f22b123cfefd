"""The tenth blind part's cases v170-v174 (merged by record_blind10.py): three 2-GPU pairs: a
Falcon-style decoder under FSDP2 whose all-gathers are made to wait for the compute before them
(v170), a DeBERTa-style encoder in tensor parallel, eager DTensor against torch.compile (v171),
and a Mistral-style decoder under DDP whose rank 1 gets 1.5 x rank 0's sequences (v172); and two
one-GPU pairs chosen to gain nothing: checkpointing only the LayerNorms and GELUs of a wide,
matmul-bound Pythia-style decoder (v173), and doubling the batch of a RoBERTa-style encoder that
already fills the GPU at 32,768 tokens a step (v174).

Sizes come from FLOP, byte and launch counts (one comment beside each builder gives its estimate
of one step on an H100), not from timings: nothing here was run on a GPU before the part was
fixed.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "multi_gpu"))

from record_common import Kit  # noqa: E402

CASES: dict[str, dict] = {
    "v170": {
        "name": "fsdp_prefetch",
        "model": "Falcon-style decoder LM (vocab 8192, untied head; 8 layers d 2560 with one "
        "LayerNorm feeding attention and MLP in parallel, multi-query attention: 20 query "
        "heads of 128 and one shared key/value head, rotary positions, causal "
        "scaled_dot_product_attention, MLP 10240 with GELU, no biases; 66 M parameters a layer, "
        "572 M in all) under FSDP2 on 2 GPUs (fully_shard per layer + root, bf16 parameters, "
        "fp32 reduce), 5 x 512 tokens per rank, AdamW(fused=True)",
        "planted": "FSDP2 prefetch defeated: each layer's all-gather waits for the compute "
        "before it (forward and backward), backward prefetch off",
        "fix": "FSDP2's default prefetching",
        "expected_fix": "fsdp_prefetch",
        "gpus": 2,
    },
    "v171": {
        "name": "dtensor_dispatch",
        "model": "DeBERTa-style encoder (vocab 8192, 6 post-norm layers d 384, 6 heads of 64, "
        "disentangled attention written out: content-to-content, content-to-position and "
        "position-to-content scores over relative positions clipped to +-64, each layer "
        "projecting a shared relative-position table to its own position queries and keys, "
        "gathered per query and key; MLP 1536 with GELU; token-prediction head on every "
        "position), batch 8 x 128 tokens, bf16 autocast, tensor parallel on 2 GPUs "
        "(parallelize_module per layer: q, k, v, position q and k, fc1 column-wise; o, fc2 "
        "row-wise)",
        "planted": "eager: DTensor's Python dispatch for each sharded op of 48 small Linears, "
        "forward and backward",
        "fix": "torch.compile(model) after parallelize_module",
        "expected_fix": "dtensor_dispatch",
        "gpus": 2,
        "compiled": True,
    },
    "v172": {
        "name": "load_imbalance_batch",
        "model": "Mistral-style decoder LM (vocab 16000, untied head; 8 pre-norm layers d 1024 "
        "with RMSNorm, grouped-query attention of 16 query heads and 4 key/value heads of 64, "
        "rotary positions, sliding-window causal attention of 512 tokens by "
        "scaled_dot_product_attention with a mask, SwiGLU MLP 3584; 142 M parameters) under "
        "DDP on 2 GPUs, sequences of 1024 tokens, bf16 autocast, AdamW(fused=True)",
        "planted": "uneven batch split: rank 1 gets 1.5 x rank 0's sequences per step (12 and "
        "8), so rank 1 computes 1.5 x as long and rank 0 waits in every all-reduce",
        "fix": "the same 20 sequences split evenly across both ranks (10 each)",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
    "v173": {
        "name": "null_activation_checkpointing",
        "model": "Pythia-style decoder LM (GPT-NeoX layout: vocab 8192, untied embeddings; 3 "
        "layers d 4096, each with attention and MLP fed in parallel from their own LayerNorm, "
        "fused qkv, 32 heads of 128 with rotary on a quarter of each head, causal "
        "scaled_dot_product_attention, MLP 16384 with GELU; 671 M parameters), batch 4 x 1024 "
        "tokens, bf16 autocast, AdamW(fused=True): a long step of large matmuls; most of the "
        "GPU's memory free",
        "planted": "torch.utils.checkpoint on the cheap pointwise submodules only: every "
        "LayerNorm and GELU (10 nn.Modules), recomputed in the backward",
        "fix": "checkpointing dropped (gains ~0: the recompute is a few cheap elementwise "
        "kernels, LayerNorms and GELUs over 4096 tokens, about 1-2 % of a step of d 4096 "
        "matmuls)",
        "expected_fix": "activation_checkpointing",
        "null": True,
    },
    "v174": {
        "name": "null_batch_size",
        "model": "RoBERTa-style masked LM (base size: vocab 50265, learned positions, 12 "
        "post-norm layers d 768, 12 heads, scaled_dot_product_attention, MLP 3072 with GELU; "
        "the MLM head, tied to the embeddings, on 77 masked positions a sequence) on sequences "
        "of 512 tokens, bf16 autocast, AdamW(fused=True): 32,768 tokens a step at batch 64, a "
        "GPU-bound step of large kernels",
        "planted": "batch 64",
        "fix": "batch 128 (2 x B, per-sample time; gains ~0: at 32,768 tokens a step every "
        "matmul and attention kernel already fills the GPU; only the per-step work, the "
        "optimizer step and the weight casts, ~2 ms of a ~54 ms step at B, is shared by "
        "twice the samples)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 2,
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


def _falcon_fsdp(k: Kit, fixed: bool, device: str, rank: int):
    from record_multi_gpu import defeat_prefetch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch, nn, F = k.torch, k.nn, k.F
    # Per rank 2560 tokens. A layer of 66.2 M parameters: forward 2 x 2560 x 66.2 M = 0.34 TFLOP
    # (~0.57 ms at ~600 TFLOP/s), backward ~1.13 ms; its bf16 all-gather (each rank receives
    # 66 MB; ~240 GB/s over NVLink as v54's trace shows: ~0.27 ms, ~0.32 ms with the copy-in)
    # twice a step (forward, and again in the backward: reshard after forward), its fp32
    # reduce-scatter (132 MB each way, ~0.6 ms). Planted, both all-gathers of each layer are
    # exposed: ~0.57 + 0.32 + 0.32 + 1.13 = 2.34 ms a layer, 18.7 ms for 8; fixed, they hide
    # under the compute (backward comm 0.92 ms against 1.13 ms of compute, ~6 % slower beside
    # NCCL's kernels): ~1.8 ms a layer, 14.3 ms. Both: FSDP2's casts and copies in and out
    # (~20 bytes a parameter, 572 M: ~5.5 ms), fused AdamW over 286 M fp32 local parameters
    # (~8 GB, ~2.7 ms), the root's embedding, head and loss and its exposed all-gather and
    # reduce-scatter (~1.5 ms), attention (~0.6 ms): planted ~29 ms, fixed ~25 ms, ~15 % off.
    # Host: ~0.8 ms of FSDP2 hooks and launches a layer, ~10 ms a step, under the GPU's.
    # Not v54's regime (604 M parameters in 8 feed-forward blocks, 2048 tokens a rank, -10 %):
    # there foreach AdamW over 302 M fp32 local parameters (~10 ms in its trace) and FSDP2's
    # copies (~4 ms) were half of a ~35 ms step that no prefetch touches, the backward was
    # bound by its own all-gather plus the fp32 reduce-scatter (~1.0 ms against ~0.8 ms of
    # compute a block), so only the forward all-gathers (~2.5 ms) could be won back, less than
    # the rounds' spread. Here the optimizer is fused (~2.7 ms), 2560 tokens keep the backward
    # compute above its communication, and both all-gathers of every layer are won back
    vocab, d, heads, hid, layers, batch, seq = (
        (256, 32, 4, 64, 2, 2, 16) if k.quick else (8192, 2560, 20, 10240, 8, 5, 512)
    )
    hd = d // heads
    cos, sin = _rotary(torch, seq, hd, device)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(d)
            self.q = nn.Linear(d, d, bias=False)
            self.kv = nn.Linear(d, 2 * hd, bias=False)  # one key/value head (multi-query)
            self.o = nn.Linear(d, d, bias=False)
            self.up = nn.Linear(d, hid, bias=False)
            self.down = nn.Linear(hid, d, bias=False)
            self.gate = None  # set by defeat_prefetch (planted)

        def forward(self, x):
            if self.gate is not None:
                x = self.gate.apply(x)  # backward: the layer below's all-gather waits
            b, t, _ = x.shape
            h = self.ln(x)
            q = self.q(h).view(b, t, heads, hd).transpose(1, 2)
            kk, v = self.kv(h).view(b, t, 1, 2 * hd).transpose(1, 2).chunk(2, -1)
            q, kk = _rope(torch, q, cos, sin), _rope(torch, kk, cos, sin)
            a = F.scaled_dot_product_attention(
                q, kk.expand(b, heads, t, hd), v.expand(b, heads, t, hd), is_causal=True
            )
            attn = self.o(a.transpose(1, 2).reshape(b, t, d))
            x = x + attn + self.down(F.gelu(self.up(h)))  # attention and MLP in parallel
            if self.gate is not None and x.is_cuda:
                self.gate.wait()  # forward: the next layer's all-gather waits for this one
            return x

    class Falcon(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList([Layer() for _ in range(layers)])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    with torch.device(device):
        model = Falcon()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for blk in model.blocks:
        fully_shard(blk, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    how = "fully_shard per layer + root, bf16 params, fp32 reduce"
    if not fixed:
        how += "; " + defeat_prefetch(model, list(model.blocks))
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(170 + rank)
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

    def loss_fn():
        logits = model(idx[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

    k.meta["fsdp"] = how
    k.meta["prefetch"] = "default" if fixed else "defeated"
    k.meta["params"] = sum(p.numel() for p in model.parameters())  # DTensor: global
    k.meta["tokens_per_rank"] = batch * seq
    return k.train(opt, loss_fn), batch, model


def _deberta_tp(k: Kit, fixed: bool, device: str, rank: int):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch, nn, F = k.torch, k.nn, k.F
    # Per rank 1024 tokens, d 384 split in 2 (3 heads a rank): every matmul is a few GFLOP and
    # the GPU work of a step ~1.5-2.5 ms (~400 small kernels, the 8 x 3 x 128 x 128 scores,
    # gathers and softmaxes included). Eager, each of the 48 parallelized Linears (8 a layer)
    # goes through DTensor's Python dispatch in the forward (from_local, the sharded mm/addmm,
    # to_local, the row-wise all-reduce) and again for its 2-3 backward ops: ~0.3-0.5 ms of host
    # a Linear, ~15-25 ms, plus ~250 plain ops (~25 us each on the device's host, ~6 ms) and
    # AdamW over the DTensor parameters (foreach ops dispatched by DTensor, ~3-5 ms): ~25-35 ms
    # a step, host-bound. torch.compile after parallelize_module traces the DTensor ops once:
    # forward and backward a few fused kernels and the 24 all-reduces (~3 ms), the loss and
    # the optimizer eager as planted (~5 ms): ~8-10 ms, ~65-75 % off
    vocab, d, heads, layers, span, seq, batch = (
        (256, 32, 4, 2, 8, 16, 2) if k.quick else (8192, 384, 6, 6, 64, 128, 8)
    )
    hd = d // heads
    world = dist.get_world_size() if dist.is_initialized() else 1

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.pq, self.pk = nn.Linear(d, d), nn.Linear(d, d)  # position queries and keys
            self.o = nn.Linear(d, d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, rel_emb, rel):
            b, t, _ = x.shape
            q, kk, v = (m(x).view(b, t, -1, hd).transpose(1, 2) for m in (self.q, self.k, self.v))
            pq, pk = (m(rel_emb).view(2 * span, -1, hd).transpose(0, 1) for m in (self.pq, self.pk))
            c2c = q @ kk.transpose(-1, -2)
            idx = rel.expand(b, q.shape[1], t, t)
            c2p = torch.gather(q @ pk.transpose(-1, -2), -1, idx)  # q_i . pk[rel(i, j)]
            p2c = torch.gather(kk @ pq.transpose(-1, -2), -1, idx).transpose(-1, -2)
            att = torch.softmax((c2c + c2p + p2c) * (3 * hd) ** -0.5, -1)
            x = self.n1(x + self.o((att @ v).transpose(1, 2).reshape(b, t, -1)))
            return self.n2(x + self.fc2(F.gelu(self.fc1(x))))

    class DeBERTa(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.n_emb = nn.Embedding(vocab, d), nn.LayerNorm(d)
            self.rel_emb, self.n_rel = nn.Embedding(2 * span, d), nn.LayerNorm(d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.head = nn.Linear(d, vocab)

        def forward(self, ids, rel):
            x = self.n_emb(self.tok(ids))
            r = self.n_rel(self.rel_emb.weight)
            for layer in self.layers:
                x = layer(x, r, rel)
            return self.head(x)

    model = DeBERTa().to(device)
    mesh = init_device_mesh(k.dt, (world,))
    plan = {
        **{m: ColwiseParallel() for m in ("q", "k", "v", "pq", "pk", "fc1")},
        "o": RowwiseParallel(),
        "fc2": RowwiseParallel(),
    }
    for layer in model.layers:
        parallelize_module(layer, mesh, plan)
    run = torch.compile(model) if fixed else model
    # foreach kernels cannot mix DTensors and plain tensors: one AdamW each
    groups = [[p for p in model.parameters() if isinstance(p, DTensor) == s] for s in (True, False)]
    opts = [torch.optim.AdamW(g, lr=1e-4) for g in groups if g]
    pos = torch.arange(seq)
    rel = ((pos[:, None] - pos[None, :]).clamp(-span, span - 1) + span).to(device)
    gen = torch.Generator().manual_seed(171)  # the same batch on both ranks (tensor parallel)
    target = torch.randint(5, vocab, (batch, seq), generator=gen)
    masked = torch.rand(batch, seq, generator=gen) < 0.15
    ids = target.masked_fill(masked, 4).to(device)  # [MASK] = 4
    target = target.to(device)

    def step():
        with k.ac:
            logits = run(ids, rel)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), target.reshape(-1))
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        for o in opts:
            o.step()

    k.meta["compiled"] = fixed
    k.meta["parallelized_linears"] = len(plan) * layers
    k.meta["tp_world"] = world
    return step, batch, model


def _mistral_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # 8 layers x 13.6 M + 2 x 16.4 M embedding and head = 142 M parameters. Per sequence of
    # 1024 tokens: 6 x 1024 x 142 M = 0.87 TFLOP of bf16 matmuls, sliding-window attention
    # (window 512, memory-efficient kernel with the mask) ~0.06 TFLOP, RMSNorm/rotary/SwiGLU/
    # residual traffic ~1 GB and the fp32 logits ~0.2 GB: ~1.9 ms a sequence at ~600 TFLOP/s
    # and ~3 TB/s, 8192-12288 rows a matmul, so the time grows with the sequences. Planted:
    # rank 0 8 sequences ~15 ms, rank 1 12 ~23 ms; fixed: 10 each ~19 ms. Both: fused AdamW
    # over 142 M (~1.3 ms), the 570 MB of fp32 gradients all-reduced in DDP's buckets (~2.5 ms,
    # overlapping the backward; the last bucket's ~0.3 ms tail exposed), ~600 kernels (~8 ms
    # of host, under the GPU's). Planted ~25 ms (rank 0 waits ~8 ms in the all-reduces), fixed
    # ~21 ms: ~14 % off (the batch ratio's 1 - 10/12 = 16.7 % less the fixed optimizer tail)
    vocab, d, heads, kv_heads, hid, layers, seq, window, base = (
        (256, 32, 4, 2, 64, 2, 16, 8, 4) if k.quick else (16000, 1024, 16, 4, 3584, 8, 1024, 512, 8)
    )
    hd = d // heads
    by_rank = [base * 5 // 4] * 2 if fixed else [base, base * 3 // 2]
    batch = by_rank[rank]
    cos, sin = _rotary(torch, seq, hd, device)
    pos = torch.arange(seq)
    back = pos[:, None] - pos[None, :]  # query - key
    allowed = ((back >= 0) & (back < window)).to(device)  # causal, within the window

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
            self.q = nn.Linear(d, d, bias=False)
            self.kv = nn.Linear(d, 2 * kv_heads * hd, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            self.wg = nn.Linear(d, hid, bias=False)
            self.wu = nn.Linear(d, hid, bias=False)
            self.wd = nn.Linear(hid, d, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.n1(x)
            q = _rope(torch, self.q(h).view(b, t, heads, hd).transpose(1, 2), cos, sin)
            kk, v = self.kv(h).view(b, t, 2 * kv_heads, hd).transpose(1, 2).chunk(2, 1)
            kk = _rope(torch, kk, cos, sin)
            rep = heads // kv_heads  # grouped-query: each key/value head serves 4 query heads
            kk, v = kk.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            a = F.scaled_dot_product_attention(q, kk, v, attn_mask=allowed)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            h = self.n2(x)
            return x + self.wd(F.silu(self.wg(h)) * self.wu(h))

    class Mistral(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = nn.RMSNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x))

    model = Mistral().to(device)
    dev_ids = [torch.device(device).index] if k.cuda else None
    run = DDP(model, device_ids=dev_ids)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(172 + rank)
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

    def loss_fn():
        with k.ac:
            logits = run(idx[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

    k.meta["batch_by_rank"] = by_rank
    k.meta["extra_work_rank"] = None if fixed else 1
    k.meta["tokens_by_rank"] = [b * seq for b in by_rank]
    return k.train(opt, loss_fn), batch, model


def _pythia(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    # 3 layers x 201 M + 2 x 33.6 M embeddings = 671 M parameters; 4096 tokens: 6 x 4096 x
    # 637 M (the input embedding is a gather) = 15.7 TFLOP of bf16 matmuls (d 4096, ~600
    # TFLOP/s), ~26 ms; causal flash attention ~0.4 TFLOP, ~0.7 ms; LayerNorm (fp32 under
    # autocast), rotary, GELU and residual traffic ~6 GB, ~2 ms; the weights cast to bf16 ~4
    # GB, ~1.3 ms; fused AdamW over 671 M (~19 GB), ~6 ms: ~36 ms, GPU-bound (~250 kernels).
    # Planted recomputes in the backward only the 10 LayerNorms and GELUs: per layer two
    # LayerNorms over 4096 x 4096 fp32 (~0.27 GB) and one GELU over 4096 x 16384 bf16 (~0.27
    # GB), ~0.55 GB, ~0.2 ms; with the final LayerNorm and the checkpoint calls (~10 x ~60 us
    # of host, hidden behind the GPU) ~0.6-0.7 ms: ~1-2 % of the step
    vocab, d, heads, layers, batch, seq = (
        (256, 32, 4, 2, 2, 16) if k.quick else (8192, 4096, 32, 3, 4, 1024)
    )
    hd = d // heads
    cos, sin = _rotary(torch, seq, hd // 4, device)  # rotary on a quarter of each head

    def pw(m, x):
        """A pointwise submodule, checkpointed in the planted variant."""
        return m(x) if fixed else checkpoint(m, x, use_reentrant=False)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.act, self.fc2 = nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(pw(self.n1, x)).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            q, kk = _rope(torch, q, cos, sin), _rope(torch, kk, cos, sin)
            a = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
            attn = self.o(a.transpose(1, 2).reshape(b, t, d))
            mlp = self.fc2(pw(self.act, self.fc1(pw(self.n2, x))))
            return x + attn + mlp  # parallel residual

    class Pythia(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_in = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.n_out = nn.LayerNorm(d)
            self.embed_out = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.embed_in(idx)
            for layer in self.layers:
                x = layer(x)
            return self.embed_out(pw(self.n_out, x))

    model = Pythia().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(173)
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

    def loss_fn():
        with k.ac:
            logits = model(idx[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

    k.meta["checkpointed_modules"] = 0 if fixed else 3 * layers + 1
    k.meta["checkpointed_kinds"] = [] if fixed else ["LayerNorm", "GELU"]
    return k.train(opt, loss_fn), batch, model


def _roberta(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # 12 layers x 7.1 M + 38.6 M embeddings = 124 M parameters. Batch 64 x 512 = 32,768 tokens:
    # 6 x 32,768 x 85 M = 16.7 TFLOP of bf16 matmuls (32,768-row GEMMs), flash attention (768
    # batch-heads x 512 x 512) ~2.2 TFLOP, the MLM head on 4928 positions (768 x 50265, tied)
    # ~1.2 TFLOP: ~20 TFLOP, ~40 ms at ~500 TFLOP/s; LayerNorm/GELU/residual traffic ~33 GB,
    # ~12 ms: ~52-54 ms a step on the GPU against ~250 kernels (~4 ms of host). Every kernel
    # is already wide at 64 (the smallest GEMM 32,768 x 768 x 768, thousands of CTAs), so 128
    # takes ~2 x: only the per-step work, fused AdamW over 124 M (~3.5 GB, ~1.2 ms), the
    # weight casts to bf16 and the fp32 gradients' first write (~1.2 GB, ~0.5 ms), is shared by
    # twice the samples: ~2 % off the time per sample. (v143's "null" 2 x batch gained 7 % on
    # 18,816 rows a step whose token-mixing GEMMs had K 196, perhaps not yet full; here the
    # rows are 32,768 and every K is 768 or more)
    vocab, d, heads, layers, seq, masked, batch = (
        (256, 32, 4, 2, 16, 3, 2) if k.quick else (50265, 768, 12, 12, 512, 77, 64)
    )
    batch *= 2 if fixed else 1

    class Layer(nn.Module):  # post-norm, as BERT and RoBERTa
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(x).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v)
            x = self.n1(x + self.o(a.transpose(1, 2).reshape(b, t, d)))
            return self.n2(x + self.ff(x))

    class RoBERTa(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq + 2, d)
            self.n_emb = nn.LayerNorm(d)
            self.layers = nn.Sequential(*[Layer() for _ in range(layers)])
            self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
            self.bias = nn.Parameter(torch.zeros(vocab))

        def forward(self, ids, where):  # (b, t) tokens, (b, m) masked positions
            x = self.tok(ids) + self.pos.weight[2 : ids.shape[1] + 2]  # RoBERTa's offset 2
            x = self.layers(self.n_emb(x))
            h = self.head(x[torch.arange(x.shape[0], device=x.device)[:, None], where])
            return F.linear(h, self.tok.weight, self.bias)  # tied to the embeddings

    model = RoBERTa().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(174)
    ids = torch.randint(5, vocab, (batch, seq), generator=gen)
    where = torch.rand(batch, seq, generator=gen).argsort(1)[:, :masked].sort(1).values
    target = ids.gather(1, where).to(device)
    ids = ids.scatter(1, where, 4).to(device)  # <mask> at the chosen positions
    where = where.to(device)

    def loss_fn():
        with k.ac:
            logits = model(ids, where)
        return F.cross_entropy(logits.float().reshape(-1, vocab), target.reshape(-1))

    k.meta["batch_multiple"] = 2
    k.meta["tokens_per_step"] = batch * seq
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v170": _falcon_fsdp,
    "v171": _deberta_tp,
    "v172": _mistral_ddp,
    "v173": _pythia,
    "v174": _roberta,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
