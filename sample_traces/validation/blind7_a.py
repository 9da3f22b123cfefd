"""The seventh blind part's first five cases (v115-v119; record_blind7.py merges them): a compiled
VQ-VAE whose time is in hand-written elementwise chains (v115), activation checkpointing on a
3-D V-Net (v116), an unfused AdamW over the 400+ small parameter tensors of a Temporal Fusion
Transformer-style forecaster (v117), and bf16 autocast on an NCHW HRNet-style convolution net with
TF32 off for matmuls and cuDNN (v118) and on a Performer-style (FAVOR+) encoder with TF32 on
(v119). Sizes come from FLOP, byte and launch counts (not timed: nothing ran on a GPU before the
part was fixed); each builder's comment gives its estimate of one step on an H100."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixes"))

from record_common import Kit, precision_loss  # noqa: E402

CASES: dict[str, dict] = {
    "v115": {
        "name": "kernel_fusion",
        "model": "VQ-VAE (64x64 images; encoder: strided 4x4 convs 3-64-128 ch with a Swish "
        "between, to 16x16, 3 residual blocks, GroupNorm, Swish, 1x1 conv to 64-D latents; a "
        "hand-written vector quantizer over a 512 x 64 codebook: squared distances as x^2 + "
        "e^2 - 2xe, argmin, gather, straight-through estimator, codebook and 0.25 x "
        "commitment losses; decoder: 1x1 conv to 128 ch, 3 residual blocks, GroupNorm, Swish, "
        "transposed 4x4 convs 128-64-3 ch with a Swish between; MSE reconstruction loss; the 6 "
        "residual blocks one shape, 128 ch at 16x16, each twice a hand-written GroupNorm (32 "
        "groups, mean and variance written out as elementwise ops), a hand-written Swish x * "
        "sigmoid(x) and a 3x3 conv), batch 512, bf16 autocast: the time in memory-bound "
        "elementwise chains",
        "planted": "eager (each elementwise op its own memory-bound kernel)",
        "fix": "torch.compile(model)",
        "expected_fix": "kernel_fusion",
        "compiled": True,
    },
    "v116": {
        "name": "activation_checkpointing",
        "model": "V-Net-style 3-D segmenter (5x5x5 Conv3d with PReLU in residual stages of "
        "16-32-64-128 ch with 1-2-3-3 convs at 64^3 to 8^3, strided 2x2x2 down convs, "
        "transposed 2x2x2 up convs, decoder stages of 3-2-1 convs on the up conv concatenated "
        "with the skip (128-64-32 ch), 1x1x1 head to 2 classes per voxel, cross-entropy) on 64^3 "
        "single-channel volumes, batch 4, bf16 autocast; most of the GPU's memory free",
        "planted": "torch.utils.checkpoint on every V-Net stage (7 nn.Modules)",
        "fix": "checkpointing dropped",
        "expected_fix": "activation_checkpointing",
    },
    "v117": {
        "name": "optimizer_fused",
        "model": "Temporal Fusion Transformer-style forecaster (gated residual networks: Linear, "
        "ELU, Linear, GLU gate, skip, LayerNorm; a static variable selection network over 4 "
        "static variables and a temporal one over 32 time-varying variables, each variable "
        "its own Linear 1-64 embedding and GRN, d 64; static context GRNs for selection and "
        "enrichment; no LSTM: learned positions, static enrichment GRN, one interpretable "
        "multi-head attention layer (4 heads, per-head queries and keys, shared values, causal) "
        "over 48 time steps, gated skips, position-wise GRN; quantile head 0.1/0.5/0.9 with "
        "pinball loss on the next step of series 0; 445 parameter tensors), batch 128, fp32",
        "planted": "AdamW(foreach=False): a Python loop of small kernels per parameter",
        "fix": "AdamW(fused=True)",
        "expected_fix": "optimizer_fused",
    },
    "v118": {
        "name": "mixed_precision",
        "model": "HRNet-style multi-resolution CNN (stem of two strided 3x3 convs to 64 ch at "
        "1/4; 4 bottlenecks to 256 ch; then 4 parallel branches of 32/64/128/256 ch kept at "
        "1/4, 1/8, 1/16 and 1/32 resolution, added one per stage, each module 4 basic "
        "residual blocks per branch with BatchNorm then an exchange unit summing every branch "
        "into every other (1x1 conv and nearest upsampling, strided 3x3 convs down; the last "
        "into the 1/4 branch only), 1, 2 and 2 modules in stages 2, 3, 4; 548 parameter "
        "tensors; NCHW; 17 heatmaps at 64x64 from the 1/4 branch, "
        "MSE loss) on 256x256 images, batch 16, fp32, TF32 off (matmuls and cuDNN) in both "
        "variants",
        "planted": "fp32, TF32 off",
        "fix": "bf16 autocast (TF32 still off)",
        "expected_fix": "mixed_precision",
    },
    "v119": {
        "name": "mixed_precision",
        "model": "Performer-style encoder (FAVOR+ attention: queries and keys mapped by 256 "
        "positive orthogonal random features exp(w.x - |x|^2/2), attention as explicit "
        "matmuls phi(Q)(phi(K)^T V) divided by its normaliser phi(Q)(phi(K)^T 1); 8 pre-norm "
        "layers d 768, 12 heads, MLP 4x GELU; token embeddings of a vocab of 8192, learned "
        "positions, masked-token LM loss on 15 % of the tokens) on sequences of 2048 tokens, "
        "batch 8, fp32 with TF32 on (matmuls and cuDNN) in both variants",
        "planted": "fp32 with TF32",
        "fix": "bf16 autocast (TF32 still on)",
        "expected_fix": "mixed_precision",
    },
}


def _vqvae(k: Kit, fixed: bool, device: str, rank: int):
    # H100 eager: ~480 elementwise and reduction kernels fwd+bwd moving ~70 GB counted in fp32
    # (~50 GB as bf16 and fp32 mixed; the 6 blocks' 16.8M-element maps most of it), ~20 ms at
    # 2.5 TB/s, beside 1.64 TFLOP of convs fwd+bwd (~5.5 ms at ~300 TFLOP/s): ~25 ms on the GPU
    # vs ~520 launches (~4 ms of host). Compiled: the GroupNorm+Swish chains fused, ~12 ms.
    torch, nn, F = k.torch, k.nn, k.F
    img, c1, c, latent, codes, groups, per_half, batch = (
        (16, 8, 16, 8, 32, 4, 1, 2) if k.quick else (64, 64, 128, 64, 512, 32, 3, 512)
    )

    def swish(x):  # written out: two kernels
        return x * torch.sigmoid(x)

    class GroupNorm(nn.Module):  # mean and variance over each group, written out
        def __init__(self, ch: int) -> None:
            super().__init__()
            self.w, self.b = nn.Parameter(torch.ones(ch)), nn.Parameter(torch.zeros(ch))

        def forward(self, x):
            b, ch, h, w = x.shape
            g = x.view(b, groups, ch // groups, h, w)
            xc = g - g.mean((2, 3, 4), keepdim=True)
            y = xc * torch.rsqrt((xc * xc).mean((2, 3, 4), keepdim=True) + 1e-5)
            return y.view(b, ch, h, w) * self.w[:, None, None] + self.b[:, None, None]

    class ResBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = GroupNorm(c), GroupNorm(c)
            self.conv1, self.conv2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)

        def forward(self, x):
            h = self.conv1(swish(self.n1(x)))
            return x + self.conv2(swish(self.n2(h)))

    class Quantizer(nn.Module):  # nearest codebook vector, straight-through gradient
        def __init__(self) -> None:
            super().__init__()
            self.codebook = nn.Parameter(torch.rand(codes, latent) * 2 / codes - 1 / codes)

        def forward(self, z):
            b, d, h, w = z.shape
            flat = z.permute(0, 2, 3, 1).reshape(-1, d)
            e = self.codebook
            dist = (flat * flat).sum(1, keepdim=True) + (e * e).sum(1)[None] - 2 * flat @ e.t()
            zq = e[dist.argmin(1)].view(b, h, w, d).permute(0, 3, 1, 2)
            codebook_loss = ((zq - z.detach()) ** 2).mean()
            commitment = ((z - zq.detach()) ** 2).mean()
            return z + (zq - z).detach(), codebook_loss + 0.25 * commitment

    class VQVAE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down1, self.down2 = nn.Conv2d(3, c1, 4, 2, 1), nn.Conv2d(c1, c, 4, 2, 1)
            self.enc = nn.Sequential(*[ResBlock() for _ in range(per_half)])
            self.enc_norm, self.to_latent = GroupNorm(c), nn.Conv2d(c, latent, 1)
            self.vq = Quantizer()
            self.from_latent = nn.Conv2d(latent, c, 1)
            self.dec = nn.Sequential(*[ResBlock() for _ in range(per_half)])
            self.dec_norm = GroupNorm(c)
            self.up1 = nn.ConvTranspose2d(c, c1, 4, 2, 1)
            self.up2 = nn.ConvTranspose2d(c1, 3, 4, 2, 1)

        def forward(self, x):
            h = self.enc(self.down2(swish(self.down1(x))))
            zq, vq_loss = self.vq(self.to_latent(swish(self.enc_norm(h))))
            h = self.dec(self.from_latent(zq))
            return self.up2(swish(self.up1(swish(self.dec_norm(h))))), vq_loss

    model = VQVAE().to(device)
    opt = k.adamw(model, fused=k.cuda)
    run = torch.compile(model) if fixed else model
    x = torch.rand(batch, 3, img, img, device=device) * 2 - 1

    def loss_fn():
        with k.ac:
            recon, vq_loss = run(x)
            return F.mse_loss(recon.float(), x) + vq_loss.float()

    k.meta["compiled"] = fixed
    return k.train(opt, loss_fn), batch, model


def _vnet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 221 GFLOP fwd a volume (the 5x5x5 convs; the decoder's 64^3 and 32^3 stages most of
    # it), x 4 x 3 = 2.67 TFLOP fwd+bwd, bf16 3-D convs at ~100 TFLOP/s: ~27 ms fixed; the
    # planted recompute of every stage adds the forward again (3.56 TFLOP), ~9 ms; ~150 launches
    # fwd+bwd (~1.5 ms of host).
    from torch.utils.checkpoint import checkpoint

    torch, nn, F = k.torch, k.nn, k.F
    side, batch, div = (8, 2, 4) if k.quick else (64, 4, 1)
    w = [max(2, ch // div) for ch in (16, 32, 64, 128)]

    def conv(ci: int, co: int):
        return nn.Sequential(nn.Conv3d(ci, co, 5, padding=2), nn.PReLU(co))

    class Stage(nn.Module):  # n 5x5x5 convs with a residual connection around them
        def __init__(self, ch: int, n: int) -> None:
            super().__init__()
            self.convs = nn.Sequential(*[conv(ch, ch) for _ in range(n - 1)])
            self.last, self.act = nn.Conv3d(ch, ch, 5, padding=2), nn.PReLU(ch)

        def forward(self, x):
            return self.act(x + self.last(self.convs(x)))

    class InStage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.act = nn.Conv3d(1, w[0], 5, padding=2), nn.PReLU(w[0])

        def forward(self, x):  # the input repeated over the channels, as the residual
            return self.act(self.conv(x) + x.expand(-1, w[0], -1, -1, -1))

    class Down(nn.Module):
        def __init__(self, ci: int, co: int, n: int) -> None:
            super().__init__()
            self.down = nn.Sequential(nn.Conv3d(ci, co, 2, 2), nn.PReLU(co))
            self.stage = Stage(co, n)

        def forward(self, x):
            return self.stage(self.down(x))

    class Up(nn.Module):
        def __init__(self, ci: int, co: int, n: int) -> None:
            super().__init__()
            self.up = nn.Sequential(nn.ConvTranspose3d(ci, co // 2, 2, 2), nn.PReLU(co // 2))
            self.stage = Stage(co, n)

        def forward(self, x, skip):
            return self.stage(torch.cat([self.up(x), skip], 1))

    class VNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = InStage()
            self.downs = nn.ModuleList(
                [Down(w[0], w[1], 2), Down(w[1], w[2], 3), Down(w[2], w[3], 3)]
            )
            self.ups = nn.ModuleList(
                [Up(w[3], w[3], 3), Up(w[3], w[2], 2), Up(w[2], w[1], 1)]
            )  # 128 ch at 16^3, 64 at 32^3, 32 at 64^3
            self.head = nn.Conv3d(w[1], 2, 1)

        def forward(self, x):
            def run(stage, *args):
                return stage(*args) if fixed else checkpoint(stage, *args, use_reentrant=False)

            skips = [run(self.inp, x)]
            for d in self.downs:
                skips.append(run(d, skips[-1]))
            h = skips.pop()
            for u in self.ups:
                h = run(u, h, skips.pop())
            return self.head(h)

    model = VNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 1, side, side, side, device=device)
    y = (x > 0.5).long().squeeze(1)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    k.meta["checkpointed_modules"] = 0 if fixed else 1 + len(model.downs) + len(model.ups)
    return k.train(opt, loss_fn), batch, model


def _tft(k: Kit, fixed: bool, device: str, rank: int):
    # H100: the GPU idles (6144 rows of width 64, 29 GFLOP a step); ~1,200 launches fwd+bwd
    # (~10 ms of host); the planted loop 9 kernels and ~80 us of host per tensor over 445
    # tensors, ~35 ms: ~45 ms planted, ~12 ms with the fused AdamW's few launches.
    torch, nn, F = k.torch, k.nn, k.F
    n_obs, n_static, steps, d, heads, batch = (
        (4, 2, 6, 8, 2, 2) if k.quick else (32, 4, 48, 64, 4, 128)
    )
    quantiles = (0.1, 0.5, 0.9)

    class GRN(nn.Module):  # Linear, ELU, Linear, GLU gate, skip, LayerNorm
        def __init__(self, din: int, dout: int, context: bool = False) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(din, d), nn.Linear(d, d)
            self.ctx = nn.Linear(d, d, bias=False) if context else None
            self.gate, self.norm = nn.Linear(d, 2 * dout), nn.LayerNorm(dout)
            self.skip = nn.Linear(din, dout) if din != dout else None

        def forward(self, x, c=None):
            h = self.fc1(x)
            if self.ctx is not None:
                h = h + self.ctx(c)
            h = self.fc2(F.elu(h))
            s = x if self.skip is None else self.skip(x)
            return self.norm(s + F.glu(self.gate(h), -1))

    class VSN(nn.Module):  # each variable embedded and transformed alone, then weighted
        def __init__(self, n: int, context: bool) -> None:
            super().__init__()
            self.embed = nn.ModuleList([nn.Linear(1, d) for _ in range(n)])
            self.grns = nn.ModuleList([GRN(d, d) for _ in range(n)])
            self.select = GRN(n * d, n, context)

        def forward(self, x, c=None):
            e = [emb(x[..., i : i + 1]) for i, emb in enumerate(self.embed)]
            weights = torch.softmax(self.select(torch.cat(e, -1), c), -1)
            h = torch.stack([g(v) for g, v in zip(self.grns, e, strict=True)], -1)
            return (h * weights.unsqueeze(-2)).sum(-1)

    class GateNorm(nn.Module):  # GLU-gated skip connection and LayerNorm
        def __init__(self) -> None:
            super().__init__()
            self.gate, self.norm = nn.Linear(d, 2 * d), nn.LayerNorm(d)

        def forward(self, x, skip):
            return self.norm(skip + F.glu(self.gate(x), -1))

    class InterpretableAttention(nn.Module):  # per-head queries and keys, one shared value
        def __init__(self) -> None:
            super().__init__()
            hd = d // heads
            self.q = nn.ModuleList([nn.Linear(d, hd) for _ in range(heads)])
            self.k = nn.ModuleList([nn.Linear(d, hd) for _ in range(heads)])
            self.v, self.o = nn.Linear(d, hd), nn.Linear(hd, d)
            self.register_buffer("mask", torch.ones(steps, steps).triu(1).bool(), persistent=False)

        def forward(self, x):
            v = self.v(x)
            outs = []
            for q, kk in zip(self.q, self.k, strict=True):
                s = q(x) @ kk(x).transpose(1, 2) * v.shape[-1] ** -0.5
                outs.append(torch.softmax(s.masked_fill(self.mask, float("-inf")), -1) @ v)
            return self.o(torch.stack(outs).mean(0))

    class TFT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.static_vsn = VSN(n_static, False)
            self.c_select, self.c_enrich = GRN(d, d), GRN(d, d)
            self.vsn = VSN(n_obs, True)
            self.pos = nn.Parameter(torch.randn(steps, d) * 0.02)
            self.enrich = GRN(d, d, True)
            self.attn, self.attn_gate = InterpretableAttention(), GateNorm()
            self.ff, self.out_gate = GRN(d, d), GateNorm()
            self.head = nn.Linear(d, len(quantiles))

        def forward(self, static, obs):
            s = self.static_vsn(static)
            h = self.vsn(obs, self.c_select(s)[:, None]) + self.pos
            e = self.enrich(h, self.c_enrich(s)[:, None])
            a = self.attn_gate(self.attn(e), e)
            return self.head(self.out_gate(self.ff(a), h))

    model = TFT().to(device)
    kw = {"fused": True} if fixed and k.cuda else {"foreach": fixed}
    opt = k.adamw(model, **kw)
    series = torch.randn(batch, steps + 1, n_obs, device=device).cumsum(1) / steps**0.5
    obs, target = series[:, :-1].contiguous(), series[:, 1:, 0].contiguous()
    static = torch.randn(batch, n_static, device=device)
    q = torch.tensor(quantiles, device=device)

    def loss_fn():  # pinball loss of each quantile
        err = target[..., None] - model(static, obs)
        return torch.maximum(q * err, (q - 1) * err).mean()

    k.meta["param_tensors"] = len(list(model.parameters()))
    k.meta["optimizer"] = "AdamW(fused=True)" if fixed else "AdamW(foreach=False)"
    return k.train(opt, loss_fn), batch, model


def _hrnet(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 0.66 TFLOP fwd+bwd a step (64 basic blocks of ~2.4 GFLOP fwd each, stage 1 ~36);
    # fp32 convs without TF32 at ~30 TFLOP/s plus ~18 GB of BatchNorm/ReLU/add traffic: ~28 ms
    # on the GPU vs ~1,300 ops fwd+bwd, 366 of them cuDNN convs (~12 ms of host); bf16: ~10 ms
    # on the GPU if cuDNN's NCHW bf16 kernels keep pace, the step then near its launch bound.
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    img, batch, div, blocks, modules = (
        (32, 2, 8, 1, (1, 1, 1)) if k.quick else (256, 16, 1, 4, (1, 2, 2))
    )
    widths = [max(2, ch // div) for ch in (32, 64, 128, 256)]
    stem, mid = max(2, 64 // div), max(2, 64 // div)

    def cbn(ci: int, co: int, ks: int = 3, s: int = 1):
        return [nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co)]

    class Basic(nn.Module):
        def __init__(self, ch: int) -> None:
            super().__init__()
            self.body = nn.Sequential(*cbn(ch, ch), nn.ReLU(), *cbn(ch, ch))

        def forward(self, x):
            return F.relu(x + self.body(x))

    class Bottleneck(nn.Module):
        def __init__(self, ci: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                *cbn(ci, mid, 1), nn.ReLU(), *cbn(mid, mid), nn.ReLU(), *cbn(mid, 4 * mid, 1)
            )
            self.short = nn.Sequential(*cbn(ci, 4 * mid, 1)) if ci != 4 * mid else nn.Identity()

        def forward(self, x):
            return F.relu(self.short(x) + self.body(x))

    class Exchange(nn.Module):  # every branch summed into every output branch
        def __init__(self, n_in: int, n_out: int) -> None:
            super().__init__()
            self.paths = nn.ModuleList()
            for i in range(n_out):
                row = nn.ModuleList()
                for j in range(n_in):
                    if j > i:  # 1x1 conv, upsampled after
                        row.append(nn.Sequential(*cbn(widths[j], widths[i], 1)))
                    elif j < i:  # strided 3x3 convs down, ReLU between
                        hops: list = []
                        for h in range(i - j):
                            last = h == i - j - 1
                            hops += cbn(widths[j], widths[i] if last else widths[j], 3, 2)
                            hops += [] if last else [nn.ReLU()]
                        row.append(nn.Sequential(*hops))
                    else:
                        row.append(nn.Identity())
                self.paths.append(row)

        def forward(self, xs):
            outs = []
            for i, row in enumerate(self.paths):
                total = xs[i]
                for j, path in enumerate(row):
                    if j > i:
                        total = total + F.interpolate(path(xs[j]), scale_factor=2 ** (j - i))
                    elif j < i:
                        total = total + path(xs[j])
                outs.append(F.relu(total))
            return outs

    class HRModule(nn.Module):  # basic blocks on each branch, then one exchange
        def __init__(self, n: int, n_out: int) -> None:
            super().__init__()
            self.branches = nn.ModuleList(
                [nn.Sequential(*[Basic(widths[b]) for _ in range(blocks)]) for b in range(n)]
            )
            self.exchange = Exchange(n, n_out)

        def forward(self, xs):
            return self.exchange([br(x) for br, x in zip(self.branches, xs, strict=True)])

    class HRNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                *cbn(3, stem, 3, 2), nn.ReLU(), *cbn(stem, stem, 3, 2), nn.ReLU()
            )
            self.layer1 = nn.Sequential(
                *[Bottleneck(stem if i == 0 else 4 * mid) for i in range(4)]
            )
            self.to_branches = nn.ModuleList(
                [nn.Sequential(*cbn(4 * mid, widths[0]), nn.ReLU()),
                 nn.Sequential(*cbn(4 * mid, widths[1], 3, 2), nn.ReLU())]
            )  # fmt: skip
            self.new_branch = nn.ModuleList(
                [nn.Sequential(*cbn(widths[b - 1], widths[b], 3, 2), nn.ReLU()) for b in (2, 3)]
            )
            stages = []
            for s, n in enumerate(modules):
                nb = s + 2
                for m in range(n):
                    last_of_all = s == len(modules) - 1 and m == n - 1
                    stages.append(HRModule(nb, 1 if last_of_all else nb))
            self.modules_ = nn.ModuleList(stages)
            self.starts = [sum(modules[:s]) for s in range(1, len(modules))]  # branch added
            self.head = nn.Conv2d(widths[0], 17, 1)

        def forward(self, x):
            f = self.layer1(self.stem(x))
            xs = [t(f) for t in self.to_branches]
            for m, mod in enumerate(self.modules_):
                if m in self.starts:
                    xs = [*xs, self.new_branch[self.starts.index(m)](xs[-1])]
                xs = mod(xs)
            return self.head(xs[0])

    model = HRNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 3, img, img, device=device)
    heat = torch.rand(batch, 17, img // 4, img // 4, device=device)

    loss_fn = precision_loss(k, fixed, model, F.mse_loss, x, heat)

    k.meta["precision"] = "bf16 autocast, TF32 off" if fixed else "fp32, TF32 off"
    return k.train(opt, loss_fn), batch, model


def _performer(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per sequence 8 layers x (29 GFLOP of Linear + 3.2 GFLOP of FAVOR+ matmuls) + a
    # 26 GFLOP LM head = 284 GFLOP fwd, x 8 x 3 = 6.8 TFLOP a step; TF32 at ~150 TFLOP/s:
    # ~50 ms with the fp32 elementwise traffic; bf16 at ~400: ~20 ms; ~700 launches fwd+bwd
    # (~5 ms of host). Memory: ~19 GB of fp32 activations saved (the 2048 x 256 features).
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    seq, d, layers, heads, feats, vocab, batch = (
        (16, 16, 1, 2, 8, 50, 2) if k.quick else (2048, 768, 8, 12, 256, 8192, 8)
    )
    hd = d // heads

    def orthogonal_features(seed: int):  # (feats, hd): orthogonal blocks, Gaussian row norms
        gen = torch.Generator().manual_seed(seed)
        blocks = []
        for _ in range(-(-feats // hd)):
            q, _ = torch.linalg.qr(torch.randn(hd, hd, generator=gen))
            blocks.append(q.t())
        norms = torch.randn(feats, hd, generator=gen).norm(dim=1, keepdim=True)
        return torch.cat(blocks)[:feats] * norms

    class FavorLayer(nn.Module):
        def __init__(self, i: int) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.register_buffer("w", orthogonal_features(119 + i), persistent=False)

        def phi(self, u, query: bool):  # positive random features of u (b, h, t, hd)
            z = u @ self.w.t() - (u * u).sum(-1, keepdim=True) / 2
            dims = (-1,) if query else (-1, -2)
            z = z - z.amax(dims, keepdim=True).detach()  # a stabiliser; cancels out
            return torch.exp(z) * feats**-0.5 + 1e-6

        def forward(self, x):
            b, t, _ = x.shape
            q, kk, v = self.qkv(self.n1(x)).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            qp, kp = self.phi(q * hd**-0.25, True), self.phi(kk * hd**-0.25, False)
            num = qp @ (kp.transpose(-1, -2) @ v)  # (b, h, t, hd)
            den = qp @ kp.sum(-2, keepdim=True).transpose(-1, -2)  # (b, h, t, 1)
            a = (num / den).transpose(1, 2).reshape(b, t, d)
            x = x + self.o(a)
            return x + self.mlp(self.n2(x))

    class Performer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(seq, d) * 0.02)
            self.layers = nn.Sequential(*[FavorLayer(i) for i in range(layers)])
            self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

        def forward(self, ids):
            return self.head(self.norm(self.layers(self.tok(ids) + self.pos))).flatten(0, 1)

    model = Performer().to(device)
    opt = k.adamw(model, fused=k.cuda)
    ids = torch.randint(1, vocab, (batch, seq), device=device)
    masked = torch.rand(batch, seq, device=device) < 0.15
    inputs = ids.masked_fill(masked, 0)  # token 0: [MASK]
    targets = ids.masked_fill(~masked, -100).flatten()  # the loss on the masked tokens only

    loss_fn = precision_loss(k, fixed, model, F.cross_entropy, inputs, targets)

    k.meta["precision"] = "bf16 autocast, TF32 on" if fixed else "fp32, TF32 on"
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v115": _vqvae,
    "v116": _vnet,
    "v117": _tft,
    "v118": _hrnet,
    "v119": _performer,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
