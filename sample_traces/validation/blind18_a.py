"""The eighteenth blind part's cases v226-v229 (merged by record_blind18.py): four one-GPU pairs,
three on a model family no earlier case used (v228's capsule network is v75's family, a new
recipe: found after the recording, once the family check read letters in any case), chosen to judge on unseen runs the two rules set
after the seventeenth part's judgement: cuDNN's fallback convolution kernels (implicit GEMM
without shared-memory staging, which ``cudnn.benchmark`` and bf16 replace) and kernel launches
read as waits on the GPU only behind a queue of GPU work. ``cudnn.benchmark`` on a SlowFast-style
video network of two pathways with 3-channel stems, in fp32 with cuDNN's TF32 (v226); bf16
autocast on a ConvLSTM-style nowcasting network, fp32 with cuDNN's TF32 (v227); CUDA graphs
(``reduce-overhead``) on an eager capsule network with dynamic routing (v228); and
``cudnn.benchmark`` on a Stacked-Hourglass-style pose network already in bf16 and channels_last,
chosen to gain nothing (v229).

Each builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model); planted and fixed
build the same model from the same seed and differ only in the planted thing. Sizes come from
FLOP, byte and launch counts over one step, worked by hand (nothing here ran on a GPU before the
part was fixed); each builder's comment gives its estimate of one step on an H200 (bf16 matmuls
at ~600 TFLOP/s, TF32 convolutions at ~100-200, memory at ~3.5 TB/s, ~10-25 us of host an eager
launch); the one-GPU cases recorded before ran up to ~1.5-2 x their estimates.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import FP32_TF32, Kit, compile_in_place, squash  # noqa: E402

CASES: dict[str, dict] = {
    "v226": {
        "name": "cudnn_benchmark",
        "model": "SlowFast-style video classifier (a slow pathway of 4 frames, 64-128-256 ch, "
        "and a fast one of 16 frames, 8-16-32 ch, each a 3-channel stem and 3 stages of 2 "
        "residual blocks of 3-D convolutions, time-strided lateral convolutions from fast to "
        "slow after the stem and each stage, BatchNorm, ReLU; 101 classes) on 16-frame clips of "
        f"112x112, batch 12, {FP32_TF32}, AdamW(fused=True)",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v227": {
        "name": "mixed_precision",
        "model": "ConvLSTM-style precipitation nowcasting network (128x128 single-channel radar "
        "frames encoded by a stride-2 3x3 convolution to 16 ch, two ConvLSTM layers of 64 ch "
        "with 3x3 gate convolutions over 8 observed frames, the same layers forecasting 8 more "
        "from their own state, a transposed convolution back to 128x128 per forecast frame; "
        f"MSE) on batches of 12 sequences, {FP32_TF32}, AdamW(fused=True)",
        "planted": "fp32, cuDNN TF32 on",
        "fix": "bf16 autocast",
        "expected_fix": "mixed_precision",
    },
    "v228": {
        "name": "cuda_graphs",
        "model": "Capsule network with dynamic routing (a 9x9 convolution to 256 ch, primary "
        "capsules of 8-D from a stride-2 9x9 convolution: 1,152 of them, 10 digit capsules of "
        "16-D from 3 routing iterations of softmax, weighted sums, squash and agreement; the "
        "margin loss and a 3-layer MLP decoder reconstructing the 28x28 input) on batches of 32 "
        f"28x28 images, {FP32_TF32}, AdamW(fused=True) eager, no torch.compile planted: a few "
        "hundred small kernels a step",
        "planted": "eager: each of the step's small kernels launched from Python",
        "fix": "torch.compile(model, mode='reduce-overhead') (as model.compile(mode="
        "'reduce-overhead')): the forward and the backward replayed as CUDA graphs",
        "expected_fix": "cuda_graphs",
        "compiled": True,
    },
    "v229": {
        "name": "null_cudnn_benchmark",
        "model": "Stacked-Hourglass-style pose network (a 7x7 stride-2 stem to 64 ch, a "
        "residual block to 128 and a max pool to 64x64, 2 hourglasses of depth 4 with 128-ch "
        "residual blocks, intermediate heatmap heads of 16 joints with supervision after each) "
        "on 256x256 images, batch 16, bf16 autocast, channels_last, AdamW(fused=True)",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True (gains ~0: bf16 channels_last convolutions "
        "whose heuristic picks are cuDNN's tuned tensor-core kernels)",
        "expected_fix": "cudnn_benchmark",
        "null": True,
    },
}


# ---------------------------------------------------------------- v226: SlowFast, benchmark


def _slowfast(k: Kit, fixed: bool, device: str, rank: int):
    # H200, cuDNN TF32: the slow stem (1x7x7, 3 -> 64) over 4 x 56 x 56 outputs ~0.18 GFLOP a
    # clip, the fast one (5x7x7, 3 -> 8) over 16 x 56 x 56 ~0.47; the slow stages' 3x3 (and
    # 3x3x3 in the last) convolutions at 56, 28, 14 ~8-10 GFLOP a clip, the fast ones ~1-2:
    # ~12 GFLOP a clip forward, x 12 x 3 = ~0.43 TFLOP a step at ~60-150 TFLOP/s under the
    # heuristics' picks, ~3-7 ms, the 3-channel stems' weight gradients maybe more (cuDNN's
    # fallback kernels); BatchNorm and ReLU over ~2 GB forward and back ~1 ms; ~250 kernels: GPU-
    # bound, ~5-10 ms. cudnn.benchmark times each shape's algorithms at the first step
    torch, nn, F = k.torch, k.nn, k.F
    k.torch.backends.cudnn.benchmark = fixed
    frames, side, batch, slow_c, fast_c, classes = (
        (8, 16, 2, (8, 8, 8), (2, 2, 2), 5)
        if k.quick
        else (16, 112, 12, (64, 128, 256), (8, 16, 32), 101)
    )
    alpha = 4  # the slow pathway sees every 4th frame

    def cbr(ci: int, co: int, kt: int, ks: int, s: int = 1, st: int = 1):
        return nn.Sequential(
            nn.Conv3d(ci, co, (kt, ks, ks), (st, s, s), (kt // 2, ks // 2, ks // 2), bias=False),
            nn.BatchNorm3d(co),
            nn.ReLU(),
        )

    class Block(nn.Module):
        def __init__(self, ci: int, co: int, kt: int, s: int) -> None:
            super().__init__()
            self.a = cbr(ci, co, kt, 3, s)
            self.b = nn.Sequential(
                nn.Conv3d(co, co, (kt, 3, 3), 1, (kt // 2, 1, 1), bias=False), nn.BatchNorm3d(co)
            )
            self.short = (
                nn.Sequential(nn.Conv3d(ci, co, 1, (1, s, s), bias=False), nn.BatchNorm3d(co))
                if s > 1 or ci != co
                else nn.Identity()
            )

        def forward(self, x):
            return F.relu(self.b(self.a(x)) + self.short(x))

    class SlowFast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.slow_stem = cbr(3, slow_c[0], 1, 7, 2)
            self.fast_stem = cbr(3, fast_c[0], 5, 7, 2)
            self.laterals = nn.ModuleList(  # after the stem and after each stage
                nn.Conv3d(c, 2 * c, (5, 1, 1), (alpha, 1, 1), (2, 0, 0))
                for c in (fast_c[0], *fast_c)
            )
            slow, fast = [], []
            si, fi = slow_c[0], fast_c[0]
            for i, (sc, fc) in enumerate(zip(slow_c, fast_c, strict=True)):
                s = 1 if i == 0 else 2
                kt_slow = 3 if i == len(slow_c) - 1 else 1  # temporal kernels late in slow
                si += 2 * fi  # the lateral's channels join the slow input
                slow.append(nn.Sequential(Block(si, sc, kt_slow, s), Block(sc, sc, kt_slow, 1)))
                fast.append(nn.Sequential(Block(fi, fc, 3, s), Block(fc, fc, 3, 1)))
                si, fi = sc, fc
            self.slow, self.fast = nn.ModuleList(slow), nn.ModuleList(fast)
            self.head = nn.Linear(si + 2 * fi + fi, classes)

        def forward(self, clip):
            s = self.slow_stem(clip[:, :, ::alpha])
            f = self.fast_stem(clip)
            for i, (slow, fast) in enumerate(zip(self.slow, self.fast, strict=True)):
                s = slow(torch.cat([s, self.laterals[i](f)], 1))
                f = fast(f)
            s = torch.cat([s, self.laterals[-1](f)], 1)
            pooled = torch.cat([s.mean((2, 3, 4)), f.mean((2, 3, 4))], 1)
            return self.head(pooled)

    model = SlowFast().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(226)
    x = torch.randn(batch, 3, frames, side, side, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        return F.cross_entropy(model(x), y)

    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["precision"] = FP32_TF32
    k.meta["frames"] = {"slow": frames // alpha, "fast": frames}
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v227: ConvLSTM, bf16


def _convlstm(k: Kit, fixed: bool, device: str, rank: int):
    # H200, cuDNN TF32: at 64 x 64 after the stride-2 encoder, a gate convolution of layer 1
    # ((16 + 64) -> 256, 3x3) is 2 x 12 x 4096 x 80 x 256 x 9 = 18.1 GFLOP, of layer 2 (128 ->
    # 256) 29.0: ~47 GFLOP a time step, x 16 steps = 0.75 TFLOP forward, ~2.3 a step at ~150-200
    # TFLOP/s: ~12-16 ms; the gates' sigmoids, tanh and products over 12.6 M values a layer and
    # step, ~1-2 ms; ~1,500 kernels (~12-20 ms of host): about balanced. bf16 autocast runs the
    # gate convolutions at twice TF32's rate and halves the gates' bytes; the host stays
    torch, nn, F = k.torch, k.nn, k.F
    side, batch, hid, obs, ahead = (16, 2, 8, 3, 3) if k.quick else (128, 12, 64, 8, 8)

    class Cell(nn.Module):
        def __init__(self, ci: int) -> None:
            super().__init__()
            self.gates = nn.Conv2d(ci + hid, 4 * hid, 3, 1, 1)

        def forward(self, x, h, c):
            i, f, g, o = self.gates(torch.cat([x, h], 1)).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            return torch.sigmoid(o) * torch.tanh(c), c

    class Nowcast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.Conv2d(1, 16, 3, 2, 1)
            self.l1, self.l2 = Cell(16), Cell(hid)
            self.dec = nn.ConvTranspose2d(hid, 1, 4, 2, 1)

        def forward(self, frames):
            b = frames.shape[0]
            z = frames.new_zeros(b, hid, side // 2, side // 2)
            h1, c1, h2, c2 = z, z, z, z
            for t in range(obs):
                h1, c1 = self.l1(F.relu(self.enc(frames[:, t])), h1, c1)
                h2, c2 = self.l2(h1, h2, c2)
            none = frames.new_zeros(b, 16, side // 2, side // 2)
            out = []
            for _ in range(ahead):
                h1, c1 = self.l1(none, h1, c1)
                h2, c2 = self.l2(h1, h2, c2)
                out.append(self.dec(h2))
            return torch.stack(out, 1)

    model = Nowcast().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(227)
    # moving blobs: each sequence a Gaussian blob drifting across the frame, plus noise
    t = torch.arange(obs + ahead, dtype=torch.float32)
    grid = torch.linspace(-1, 1, side)
    start = torch.rand(batch, 2, generator=gen) * 1.2 - 0.6
    vel = (torch.rand(batch, 2, generator=gen) - 0.5) * 0.1
    cy = (start[:, 0, None] + vel[:, 0, None] * t)[:, :, None, None]
    cx = (start[:, 1, None] + vel[:, 1, None] * t)[:, :, None, None]
    seq = torch.exp(-((grid[:, None] - cy) ** 2 + (grid[None, :] - cx) ** 2) / 0.05)
    seq = (seq + 0.05 * torch.randn(seq.shape, generator=gen)).unsqueeze(2).to(device)
    past, future = seq[:, :obs], seq[:, obs:]

    def loss_fn():
        if fixed:
            with k.ac:
                return F.mse_loss(model(past).float(), future)
        return F.mse_loss(model(past), future)

    k.meta["precision"] = f"bf16 autocast, {FP32_TF32}" if fixed else FP32_TF32
    k.meta["time_steps"] = obs + ahead
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v228: CapsNet, CUDA graphs


def _capsnet(k: Kit, fixed: bool, device: str, rank: int):
    # H200: the 9x9 convolution 1 -> 256 over 20 x 20 outputs (0.27 GFLOP for 32 images), the
    # primary capsules' 9x9 stride-2 convolution 256 -> 256 over 6 x 6 (12.2 GFLOP), the digit
    # capsules' 1,152 x 10 products of 16 x 8 by 8 (47 M MACs) and 3 routing iterations over
    # [32, 1152, 10, 16] (5.9 M values, 23.6 MB): ~0.3-0.5 ms of GPU forward and back; ~300
    # kernels (the routing's softmax, products, sums, squash and agreement, the decoder, the
    # margin loss, their gradients) at ~10-25 us of host each: launch-bound, ~3-6 ms.
    # reduce-overhead replays the forward and the backward as two graphs: ~50-75 % off
    torch, nn, F = k.torch, k.nn, k.F
    side, batch, ch, caps_d, out_d, n_cls, iters = (
        (28, 4, 16, 4, 8, 10, 3) if k.quick else (28, 32, 256, 8, 16, 10, 3)
    )

    class CapsNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, ch, 9)
            self.primary = nn.Conv2d(ch, 32 * caps_d, 9, 2)
            n_prim = 32 * 6 * 6
            self.W = nn.Parameter(0.01 * torch.randn(n_prim, n_cls, out_d, caps_d))
            self.decoder = nn.Sequential(
                nn.Linear(n_cls * out_d, 512), nn.ReLU(), nn.Linear(512, 1024), nn.ReLU(),
                nn.Linear(1024, side * side), nn.Sigmoid(),
            )  # fmt: skip

        def forward(self, x, y_onehot):
            b = x.shape[0]
            u = self.primary(F.relu(self.conv(x)))  # [b, 32 * caps_d, 6, 6]
            u = squash(u.view(b, 32, caps_d, 36).permute(0, 1, 3, 2).reshape(b, -1, caps_d))
            u_hat = torch.einsum("ncdk,bnk->bncd", self.W, u)  # [b, 1152, 10, 16]
            logits = u_hat.new_zeros(b, u_hat.shape[1], n_cls)
            for i in range(iters):  # dynamic routing by agreement
                c = torch.softmax(logits, 2)
                v = squash((c.unsqueeze(-1) * u_hat).sum(1))  # [b, 10, 16]
                if i < iters - 1:
                    logits = logits + (u_hat * v.unsqueeze(1)).sum(-1)
            lengths = v.norm(dim=-1)
            recon = self.decoder((v * y_onehot.unsqueeze(-1)).flatten(1))
            return lengths, recon

    model = CapsNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    mode = "reduce-overhead"
    if fixed:
        k.meta["compile_how"] = compile_in_place(model, mode=mode)
    gen = torch.Generator().manual_seed(228)
    y = torch.randint(0, n_cls, (batch,), generator=gen)
    # strokes: each class a bar at its own angle through the centre, blurred, plus noise
    grid = torch.linspace(-1, 1, side)
    ang = y.float() * (3.14159 / n_cls)
    dist = (grid[None, :, None] * torch.sin(ang)[:, None, None]) - (
        grid[None, None, :] * torch.cos(ang)[:, None, None]
    )
    img = torch.exp(-(dist**2) / 0.02) + 0.05 * torch.rand(batch, side, side, generator=gen)
    x = img.clamp(0, 1).unsqueeze(1).to(device)
    y = y.to(device)
    onehot = F.one_hot(y, n_cls).float()

    def loss_fn():
        lengths, recon = model(x, onehot)
        margin = (
            onehot * F.relu(0.9 - lengths) ** 2 + 0.5 * (1 - onehot) * F.relu(lengths - 0.1) ** 2
        )
        return (
            margin.sum(1).mean() + 0.0005 * F.mse_loss(recon, x.flatten(1), reduction="sum") / batch
        )

    k.meta["compiled"] = fixed
    k.meta["compile_mode"] = mode if fixed else "eager"
    k.meta["precision"] = FP32_TF32
    k.meta["routing_iterations"] = iters
    return k.train(opt, loss_fn), batch, model


# ---------------------------------------------------------------- v229: Hourglass, benchmark (null)


def _hourglass(k: Kit, fixed: bool, device: str, rank: int):
    # H200, bf16, channels_last: 16 images, the stem at 128 x 128 and 2 hourglasses of depth 4
    # at 64 down to 4 x 4, each resolution ~3 residual blocks of 128 ch (a 1x1 down to 64, a
    # 3x3, a 1x1 up): ~5-6 GFLOP an image forward, x 16 x 3 = ~0.27 TFLOP a step at ~100-200
    # TFLOP/s, ~2-3 ms; BatchNorm, ReLU, the upsampling adds over ~3 GB forward and back in bf16
    # ~1-1.5 ms; ~900 kernels (~9-15 ms of host): the host binds. cudnn.benchmark picks among
    # bf16 tensor-core kernels the heuristic already picks well, behind a host-bound step: ~0
    torch, nn, F = k.torch, k.nn, k.F
    k.torch.backends.cudnn.benchmark = fixed
    side, batch, c, depth, stacks, joints = (
        (32, 2, 16, 2, 2, 4) if k.quick else (256, 16, 128, 4, 2, 16)
    )

    class Residual(nn.Module):
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            h = co // 2
            self.body = nn.Sequential(
                nn.BatchNorm2d(ci), nn.ReLU(), nn.Conv2d(ci, h, 1),
                nn.BatchNorm2d(h), nn.ReLU(), nn.Conv2d(h, h, 3, 1, 1),
                nn.BatchNorm2d(h), nn.ReLU(), nn.Conv2d(h, co, 1),
            )  # fmt: skip
            self.skip = nn.Conv2d(ci, co, 1) if ci != co else nn.Identity()

        def forward(self, x):
            return self.body(x) + self.skip(x)

    class Hourglass(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.up1 = Residual(c, c)
            self.low1 = Residual(c, c)
            self.low2 = Hourglass(n - 1) if n > 1 else Residual(c, c)
            self.low3 = Residual(c, c)

        def forward(self, x):
            low = self.low3(self.low2(self.low1(F.max_pool2d(x, 2))))
            return self.up1(x) + F.interpolate(low, scale_factor=2, mode="nearest")

    class StackedHourglass(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, 2, 3), nn.BatchNorm2d(64), nn.ReLU(), Residual(64, c),
                nn.MaxPool2d(2),
            )  # fmt: skip
            self.hgs = nn.ModuleList(Hourglass(depth) for _ in range(stacks))
            self.heads = nn.ModuleList(nn.Conv2d(c, joints, 1) for _ in range(stacks))
            self.back = nn.ModuleList(nn.Conv2d(joints, c, 1) for _ in range(stacks - 1))

        def forward(self, x):
            x = self.stem(x)
            outs = []
            for i, hg in enumerate(self.hgs):
                y = hg(x)
                heat = self.heads[i](y)
                outs.append(heat)
                if i < len(self.back):
                    x = x + y + self.back[i](heat)
            return torch.stack(outs, 1)

    model = StackedHourglass().to(device, memory_format=torch.channels_last)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(229)
    x = torch.randn(batch, 3, side, side, generator=gen).to(
        device, memory_format=torch.channels_last
    )
    # target heatmaps: one Gaussian per joint at a random place, at a quarter of the input side
    q = side // 4
    grid = torch.arange(q, dtype=torch.float32)
    at = torch.rand(batch, joints, 2, generator=gen) * (q - 1)
    heat = torch.exp(
        -(
            (grid[:, None] - at[..., 0, None, None]) ** 2
            + (grid[None, :] - at[..., 1, None, None]) ** 2
        )
        / 4.0
    ).to(device)

    def loss_fn():
        with k.ac:
            out = model(x)
        return F.mse_loss(out.float(), heat.unsqueeze(1).expand_as(out))

    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["precision"] = "bf16 autocast"
    k.meta["memory_format"] = "channels_last"
    return k.train(opt, loss_fn), batch, model


BUILDERS = {"v226": _slowfast, "v227": _convlstm, "v228": _capsnet, "v229": _hourglass}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
