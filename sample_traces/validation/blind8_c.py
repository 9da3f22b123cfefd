"""The eighth blind part's cases v140-v144 (merged by record_blind8.py): an 8 x batch on a
TabTransformer tabular classifier that leaves the GPU idle at batch 32 (v140); a launch-bound
Liquid time-constant network unrolled in Python, its whole step captured in a CUDA graph (v141);
two pairs chosen to gain nothing: a fused optimizer over the 6 parameter tensors of an SRCNN whose
step is three large convolutions (v142) and a 2 x batch on an MLP-Mixer step that already fills
the GPU (v143); and a 2-GPU WaveNet pair whose pace-setter, rank 1, gets 1.5 x rank 0's samples
of each step (v144), with no host work of its own.

Sizes come from FLOP, byte and launch counts (one line beside each), not from timings: nothing
here was run on a GPU before the part was fixed.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, whole_step_graph  # noqa: E402

CASES: dict[str, dict] = {
    "v140": {
        "name": "batch_size",
        "model": "TabTransformer-style tabular classifier (16 categorical columns of 50 values "
        "each, embedded d 32 from one shared table with a learned column embedding added; 6 "
        "post-norm transformer layers over the 16 column tokens, 8 heads of 4, explicit "
        "attention, MLP 4x with GELU; the contextual embeddings flattened and concatenated with "
        "16 LayerNorm-ed continuous features, an MLP 528-256-128-1 with ReLU, binary "
        "cross-entropy), fp32 (TF32 off for matmuls), AdamW(fused=True): every kernel of the step "
        "is tiny, the GPU idle between launches",
        "planted": "batch 32",
        "fix": "batch 256 (8 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 8,
    },
    "v141": {
        "name": "cuda_graphs",
        "model": "Liquid time-constant (LTC) recurrent network (128 neurons, 16 inputs mapped "
        "once by a Linear; each of 32 time steps 2 unfolds of the fused semi-implicit solver, x "
        "= (x + dt f A) / (1 + dt (1/tau + f)) with f = sigmoid(input + x W_rec), learned "
        "reversal potentials A and time constants tau, written as separate small ops and "
        "unrolled in Python; a Linear readout 128-4 at every step, MSE loss; static shapes), "
        "batch 64 sequences, fp32, Adam(lr 1e-3, capturable=True) in both variants: the step is "
        "bound by launches, its GPU idle most of it",
        "planted": "eager: each of the step's small kernels launched from Python",
        "fix": "the whole step captured once with torch.cuda.graph and replayed (warm-up on a "
        "side stream first)",
        "expected_fix": "cuda_graphs",
    },
    "v142": {
        "name": "null_optimizer_fused",
        "model": "SRCNN-style super-resolution net (9-5-5: conv 9x9 3-64, ReLU, conv 5x5 64-32, "
        "ReLU, conv 5x5 32-3, same padding; 6 parameter tensors, 69 K parameters) on 3x "
        "bicubic-upsampled 512x512 RGB images, MSE to the originals, batch 16, fp32 (TF32 off "
        "for matmuls, on for cuDNN): the step is three large convolutions over full-size "
        "feature maps",
        "planted": "Adam(foreach=False): a Python loop of small kernels per parameter",
        "fix": "Adam(fused=True) (gains ~0: 6 parameter tensors, the optimizer a sliver of the "
        "step)",
        "expected_fix": "optimizer_fused",
        "null": True,
    },
    "v143": {
        "name": "null_batch_size",
        "model": "MLP-Mixer-style image classifier (B/16: 16x16 patches of 224x224 images to "
        "196 tokens of d 768; 12 mixer layers, each a pre-norm token-mixing MLP 196-384-196 "
        "and a pre-norm channel-mixing MLP 768-3072-768 with GELU and residuals; mean pool, "
        "1000 classes; 59 M parameters), bf16 autocast, AdamW(fused=True): large matmuls, the "
        "GPU busy throughout the step",
        "planted": "batch 96",
        "fix": "batch 192 (2 x B, per-sample time) (gains ~0: the GPU is already full at B)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 2,
        "null": True,
    },
    "v144": {
        "name": "load_imbalance_batch",
        "model": "WaveNet-style autoregressive audio model (256 mu-law classes embedded to 128 "
        "residual channels, a causal 2-tap conv, then 2 stacks of 10 dilated causal 2-tap "
        "Conv1d layers, dilations 1 to 512, each a tanh-sigmoid gate with 1x1 residual 128 "
        "(none on the last) and skip 256 convs; the skips summed, ReLU, 1x1 256-256, ReLU, 1x1 "
        "256-256, cross-entropy on the next sample) under DDP on 2 GPUs, 20 sequences of 8192 "
        "samples a step in all, bf16 autocast",
        "planted": "uneven batch split: rank 1 gets 1.5 x rank 0's samples per step (8 and 12 "
        "sequences), so rank 1 computes about 1.5 x as much and rank 0 waits in every all-reduce",
        "fix": "the same samples split evenly across both ranks (10 sequences each)",
        "expected_fix": "load_imbalance",
        "gpus": 2,
    },
}


def _tabtransformer(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # batch 32: 512 column tokens of d 32; ~14 kernels a layer forward and ~25 backward, ~300 a
    # step with the embeddings, MLP, loss and fused AdamW: ~3-4 ms of host launches, the GPU
    # ~0.8 ms (every kernel a few microseconds). Batch 256 (4096 tokens, 0.16 GFLOP a layer)
    # still ~1.5 ms of GPU: both launch-bound, so 8 x samples for about the same step
    cols, card, d, heads, layers, conts, batch = (
        (4, 5, 8, 2, 2, 3, 4) if k.quick else (16, 50, 32, 8, 6, 16, 32)
    )
    batch *= 8 if fixed else 1
    hidden = (256, 128) if not k.quick else (16, 8)

    class Layer(nn.Module):  # post-norm, explicit attention
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(x).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            att = torch.softmax((q * q.shape[-1] ** -0.5) @ kk.transpose(-1, -2), -1)
            x = self.n1(x + self.o((att @ v).transpose(1, 2).reshape(b, t, d)))
            return self.n2(x + self.ff(x))

    class TabTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = nn.Embedding(cols * card, d)  # every column's values, one table
            self.col = nn.Parameter(torch.randn(cols, d) * 0.02)
            self.register_buffer("offset", torch.arange(cols) * card, persistent=False)
            self.layers = nn.Sequential(*[Layer() for _ in range(layers)])
            self.cont_norm = nn.LayerNorm(conts)
            self.mlp = nn.Sequential(
                nn.Linear(cols * d + conts, hidden[0]), nn.ReLU(),
                nn.Linear(hidden[0], hidden[1]), nn.ReLU(), nn.Linear(hidden[1], 1),
            )  # fmt: skip

        def forward(self, cat, cont):
            ctx = self.layers(self.table(cat + self.offset) + self.col)
            return self.mlp(torch.cat([ctx.flatten(1), self.cont_norm(cont)], 1)).squeeze(1)

    model = TabTransformer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(140)
    cat = torch.randint(0, card, (batch, cols), generator=gen).to(device)
    cont = torch.randn(batch, conts, generator=gen).to(device)
    label = torch.randint(0, 2, (batch,), generator=gen).float().to(device)

    def loss_fn():
        return F.binary_cross_entropy_with_logits(model(cat, cont), label)

    k.meta["batch_multiple"] = 8
    k.meta["column_tokens_per_step"] = batch * cols
    return k.train(opt, loss_fn), batch, model


def _ltc(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # 32 steps x 2 unfolds = 64 solver steps of ~10 small ops each (mm, add, sigmoid, 7
    # elementwise) forward and ~15 kernels backward: ~1600 kernels a step, ~12-20 ms of host
    # launches (~8-12 us a kernel, Python and autograd included); each kernel ~2-3 us of GPU
    # (64 x 128 elements, a 64x128x128 mm), so a replayed graph ~4-5 ms: ~65-75 % off the step
    neurons, inputs, outputs, steps, unfolds, batch = (
        (8, 3, 2, 4, 2, 2) if k.quick else (128, 16, 4, 32, 2, 64)
    )
    dt = 1.0 / unfolds

    class LTC(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sensory = nn.Linear(inputs, neurons)  # the input current, mapped once
            self.w_rec = nn.Parameter(torch.randn(neurons, neurons) / neurons**0.5)
            self.rev = nn.Parameter(torch.randn(neurons))  # reversal potentials A
            self.tau = nn.Parameter(torch.zeros(neurons))  # time constants, softplus'ed
            self.readout = nn.Linear(neurons, outputs)

        def forward(self, u):  # (b, steps, inputs) -> (b, steps, outputs)
            current = self.sensory(u)
            inv_tau = 1 / (F.softplus(self.tau) + 0.1)
            x = torch.zeros(u.shape[0], neurons, device=u.device)
            states = []
            for t in range(steps):
                for _ in range(unfolds):  # fused semi-implicit Euler steps of the LTC ODE
                    f = torch.sigmoid(current[:, t] + x @ self.w_rec)
                    x = (x + dt * (f * self.rev)) / (1 + dt * (inv_tau + f))
                states.append(x)
            return self.readout(torch.stack(states, 1))

    model = LTC().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=k.cuda)
    gen = torch.Generator().manual_seed(141)
    u = torch.randn(batch, steps, inputs, generator=gen).to(device)
    target = torch.randn(batch, steps, outputs, generator=gen).cumsum(1).div(steps**0.5).to(device)

    def loss_fn():
        return F.mse_loss(model(u), target)

    step = whole_step_graph(k, opt, loss_fn, k.train(opt, loss_fn), fixed)
    k.meta["optimizer"] = "Adam(capturable=True)"
    k.meta["solver_steps"] = steps * unfolds
    return step, batch, model


def _srcnn(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # 69 K MACs a pixel forward; 16 x 512 x 512 = 4.2 M pixels: 0.58 TFLOP forward, ~1.6 a step
    # (no data gradient for the first conv) at cuDNN TF32, ~10-15 ms; ReLUs and their backward
    # ~7 GB, ~3 ms; ~50 launches besides the optimizer's: GPU-bound, ~15-20 ms. Adam's loop over
    # 6 tensors is ~42 tiny kernels (~0.1 ms of GPU, its host time hidden behind the queue)
    img, batch, scale = (24, 2, 3) if k.quick else (512, 16, 3)

    class SRCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(3, 64, 9, padding=4)
            self.c2 = nn.Conv2d(64, 32, 5, padding=2)
            self.c3 = nn.Conv2d(32, 3, 5, padding=2)

        def forward(self, x):
            return self.c3(F.relu(self.c2(F.relu(self.c1(x)))))

    model = SRCNN().to(device)
    kw = {"fused": True} if fixed and k.cuda else {"foreach": fixed}
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, **kw)
    gen = torch.Generator().manual_seed(142)
    hr = torch.rand(batch, 3, img // 8, img // 8, generator=gen)  # smooth images: upsampled noise
    hr = F.interpolate(hr, size=(img, img), mode="bicubic", align_corners=False).clamp(0, 1)
    lr = F.interpolate(hr, scale_factor=1 / scale, mode="bicubic", align_corners=False)
    x = F.interpolate(lr, size=(img, img), mode="bicubic", align_corners=False).to(device)
    hr = hr.to(device)

    def loss_fn():
        return F.mse_loss(model(x), hr)

    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["optimizer"] = "Adam(fused=True)" if fixed else "Adam(foreach=False)"
    return k.train(opt, loss_fn), batch, model


def _mlp_mixer(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # per image 12.6 GMAC forward (channel MLPs 11.1, token MLPs 1.4, patches 0.1): 76 GFLOP a
    # step, 7.3 TFLOP at batch 96, ~13-15 ms of bf16 matmuls; LayerNorm, GELU, transposes and
    # residuals ~18 MB an image a layer, ~21 GB, ~9 ms; ~600 launches, ~6 ms of host: GPU-bound,
    # ~25 ms. Fixed per step: fused AdamW over 59 M parameters (~1.7 GB, ~0.7 ms) and the bf16
    # weight casts: 2 x batch amortises ~1 ms of ~25, ~2 % per sample. Batch 192 ~14 GB saved
    img, patch, d, tok, ch, depth, batch = (
        (32, 8, 32, 16, 64, 2, 2) if k.quick else (224, 16, 768, 384, 3072, 12, 96)
    )
    batch *= 2 if fixed else 1
    n = (img // patch) ** 2

    class MixerLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.token = nn.Sequential(nn.Linear(n, tok), nn.GELU(), nn.Linear(tok, n))
            self.channel = nn.Sequential(nn.Linear(d, ch), nn.GELU(), nn.Linear(ch, d))

        def forward(self, x):  # (b, n, d)
            x = x + self.token(self.n1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.channel(self.n2(x))

    class MLPMixer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, d, patch, patch)
            self.layers = nn.Sequential(*[MixerLayer() for _ in range(depth)])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 1000)

        def forward(self, x):
            t = self.stem(x).flatten(2).transpose(1, 2)
            return self.head(self.norm(self.layers(t)).mean(1))

    model = MLPMixer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 3, img, img, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    k.meta["batch_multiple"] = 2
    k.meta["tokens_per_step"] = batch * n
    return k.train(opt, loss_fn), batch, model


def _wavenet_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # per position ~2.4 M MACs forward (each layer's 2-tap conv 128-256 66 K, residual 16 K,
    # skip 33 K; 20 layers; head 131 K); rank 1 planted: 12 x 8192 = 98 K positions, 1.4 TFLOP a
    # step of bf16 convs, ~6-8 ms, and the gates, pads, residual and skip sums ~2.7 GB a layer
    # forward and backward, ~54 GB, ~20 ms: ~25-30 ms; rank 0 (8) ~2/3 of it, both at 10 ~5/6;
    # ~850 launches, ~8 ms of host; 2.9 M parameters (~12 MB all-reduced): the step is rank 1's
    # and the even split gains ~15 %
    classes, res, skip, stacks, per_stack, length, split = (
        (256, 8, 8, 1, 3, 64, (4, 6)) if k.quick else (256, 128, 256, 2, 10, 8192, (8, 12))
    )
    total = sum(split)
    batch = total // 2 if fixed else split[rank]
    start = rank * batch if fixed else (0, split[0])[rank]

    class Gated(nn.Module):  # a dilated causal 2-tap conv, tanh-sigmoid gate, residual and skip
        def __init__(self, dilation: int, last: bool) -> None:
            super().__init__()
            self.dilation = dilation
            self.conv = nn.Conv1d(res, 2 * res, 2, dilation=dilation)
            self.res = None if last else nn.Conv1d(res, res, 1)  # the last's output: skip only
            self.skip = nn.Conv1d(res, skip, 1)

        def forward(self, x):
            a, g = self.conv(F.pad(x, (self.dilation, 0))).chunk(2, 1)
            h = torch.tanh(a) * torch.sigmoid(g)
            return (x if self.res is None else x + self.res(h)), self.skip(h)

    class WaveNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(classes, res)
            self.causal = nn.Conv1d(res, res, 2)
            dil = [2**i for i in range(per_stack)] * stacks
            self.layers = nn.ModuleList([Gated(x, i == len(dil) - 1) for i, x in enumerate(dil)])
            self.out1, self.out2 = nn.Conv1d(skip, 256, 1), nn.Conv1d(256, classes, 1)

        def forward(self, q):  # (b, t) mu-law classes -> (b, classes, t) logits
            x = self.causal(F.pad(self.embed(q).transpose(1, 2), (1, 0)))
            skips = 0
            for layer in self.layers:
                x, s = layer(x)
                skips = skips + s
            return self.out2(F.relu(self.out1(F.relu(skips))))

    model = WaveNet().to(device)
    ids = [torch.device(device).index] if k.cuda else None
    run = DDP(model, device_ids=ids)
    opt = k.adamw(model, fused=k.cuda)
    # the same sequences on both ranks: each rank takes its rows of the step's 20 (quick: 10)
    rows = torch.randint(
        0, classes, (total, length + 1), generator=torch.Generator().manual_seed(144)
    )
    seqs = rows[start : start + batch].to(device)
    inputs, target = seqs[:, :-1], seqs[:, 1:]

    def loss_fn():
        with k.ac:
            logits = run(inputs)
        return F.cross_entropy(logits.float(), target)

    k.meta["batch_by_rank"] = [total // 2] * 2 if fixed else list(split)
    k.meta["extra_work_rank"] = 1
    k.meta["sequence_length"] = length
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v140": _tabtransformer,
    "v141": _ltc,
    "v142": _srcnn,
    "v143": _mlp_mixer,
    "v144": _wavenet_ddp,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
