"""The validation set's seventh blind part, cases v120-v124 (record_blind7.py merges them): a
SimCLR pre-training step fed by per-sample numpy augmentation (DataLoader workers), a ParticleNet
jet tagger fed from pageable memory (pinning), a RetinaNet detector whose loss reads the GPU three
times a step (host syncs), an eager launch-bound SchNet step (CUDA graphs) and a RepVGG net in its
training form (cudnn.benchmark). Each builder: (kit, fixed, device, rank) -> (step_fn,
samples_per_step, model); planted and fixed build the same model from the same seed and differ
only in the planted thing."""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, basic_block, cycled, whole_step_graph  # noqa: E402

CASES: dict[str, dict] = {
    "v120": {
        "name": "dataloader_workers",
        "model": "SimCLR-style contrastive pre-training (a ResNeXt-style encoder: 3x3 stem 64 ch "
        "at 96x96, 4 stages of one bottleneck each, out 128/256/512/1024 ch, bottleneck widths "
        "64/128/256/512 with grouped 3x3 convs of cardinality 8, 1x1 conv shortcuts, strides "
        "1/2/2/2, BatchNorm; a 2-layer projection head 1024-512-128; "
        "NT-Xent loss at temperature 0.5) on two augmented views of each 96x96 uint8 image "
        "held in memory, batch 256 images (512 views), bf16 autocast; each view augmented per "
        "sample in numpy in the Dataset: random resized crop with a bilinear resize, horizontal "
        "flip, colour jitter of brightness, contrast and saturation, random grayscale, 3x3 "
        "Gaussian blur",
        "planted": "DataLoader(num_workers=0): augmenting runs in the training process",
        "fix": "DataLoader(num_workers=6, persistent_workers=True, prefetch_factor=4)",
        "expected_fix": "dataloader_workers",
    },
    "v121": {
        "name": "pin_memory",
        "model": "ParticleNet-style jet tagger (3 EdgeConv blocks of 64/128/256 ch on the k=16 "
        "nearest neighbours in feature space of 128 particles with 16 features each, after an "
        "input BatchNorm: per edge ReLU of a linear map of the particle and its neighbour "
        "difference, averaged over the neighbours, BatchNorm and ReLU, a 1x1 conv with BatchNorm "
        "and ReLU, a 1x1 conv-BN shortcut; padded particles masked out; global average pool "
        "over the real particles, head 256-128-10 classes), batch 4096 jets, bf16 autocast",
        "planted": "35.7 MB per step (fp32 particle features, fp32 masks, int64 labels) copied "
        "from pageable memory with non_blocking=True",
        "fix": "the same batches pinned, copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v122": {
        "name": "host_sync",
        "model": "RetinaNet-style detector (ResNet-style backbone: a strided 3x3 stem 64 ch, "
        "basic blocks 64/128/256/512 ch, 2 per stage, each stage's first strided, BatchNorm; an "
        "FPN of 3 levels 128 ch at strides 8/16/32 (1x1 laterals, nearest top-down upsampling, "
        "3x3 outputs); class and box subnets of 4 3x3 convs 128 ch each, shared over the "
        "levels; 9 anchors per "
        "position, 20 classes, 12096 anchors per image; sigmoid focal loss and smooth-L1 on the "
        "positive anchors, about 1 % of them; anchor targets pre-made random tensors on the "
        "GPU) on 256x256 images, batch 32, bf16 autocast",
        "planted": "3 syncs per step: the number of positive anchors read by .item() to "
        "normalise the loss, the positive anchors' box errors picked by boolean-mask indexing "
        "(a nonzero sync), and loss.item() for the log",
        "fix": "the same loss with the positive count clamped on the GPU, positives selected by "
        "multiplying with a float mask, the log summed on the GPU, never read in the step",
        "expected_fix": "host_sync",
    },
    "v123": {
        "name": "cuda_graphs",
        "model": "SchNet-style molecular network (atom embeddings d 64 over 10 atom types, 3 "
        "interaction blocks of continuous-filter convolutions: pairwise distances of 24 atoms "
        "expanded on 50 Gaussian radial basis functions, filter MLPs 50-64-64 with shifted "
        "softplus, cosine cutoff at 5, dense all-pairs messages, atom-wise Linear 64-64 layers; "
        "energy head 64-32-1 summed per molecule, MSE loss; static shapes), batch 16 "
        "molecules, fp32, AdamW(capturable=True) "
        "in both variants: the step is bound by launches, its GPU idle most of it",
        "planted": "eager (one launch per op)",
        "fix": "the whole step (forward, backward, optimizer) captured once by "
        "torch.cuda.graph and replayed (no torch.compile)",
        "expected_fix": "cuda_graphs",
    },
    "v124": {
        "name": "cudnn_benchmark",
        "model": "RepVGG-style CNN in its training form (each block a 3x3 conv-BN branch, a 1x1 "
        "conv-BN branch and, where shapes allow, an identity-BN branch, summed, then ReLU; "
        "stages of 64, 128, 256, 512 ch with 1/2/4/1 blocks, each stage's first block strided; "
        "only dense convolutions; 100 classes) on 128x128 images, batch 256, fp32 (cuDNN "
        "TF32)",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
}


class TwoViews:
    """v120's dataset: ``pool`` uint8 ``hw`` x ``hw`` RGB images made once (smooth blobs and
    noise), ``1_000_000`` virtual samples cycling over them. Per sample (in numpy, seeded by the
    index) two views, each: a random resized crop (scale 0.2-1, aspect 3/4-4/3) resized back to
    ``hw`` x ``hw`` bilinearly, a horizontal flip (p 0.5), colour jitter (p 0.8) of brightness,
    contrast and saturation (0.6-1.4 each, in a random order), grayscale (p 0.2), a 3x3 Gaussian
    blur (sigma 0.1-2) as shifted adds. Images and views are channels-first. Returns the two
    views as a (2, 3, hw, hw) uint8 tensor."""

    def __init__(self, hw: int, pool: int) -> None:
        import numpy as np

        rng = np.random.default_rng(120)
        self.hw = hw
        yy, xx = np.mgrid[0:hw, 0:hw].astype(np.float32)
        imgs = []
        for _ in range(pool):
            img = np.zeros((hw, hw, 3), np.float32)
            for _ in range(6):  # coloured blobs on noise
                cy, cx, r = rng.uniform(0, hw), rng.uniform(0, hw), rng.uniform(hw / 10, hw / 3)
                blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
                img += blob[..., None] * rng.uniform(0, 200, 3).astype(np.float32)
            img += rng.normal(40, 20, img.shape)
            imgs.append(np.clip(img, 0, 255).astype(np.uint8).transpose(2, 0, 1))
        self.images = np.stack(imgs)

    def __len__(self) -> int:
        return 1_000_000

    def _view(self, img, rng):  # img (3, hw, hw) uint8
        import numpy as np

        hw = self.hw
        area = hw * hw * rng.uniform(0.2, 1.0)
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw = int(min(hw, max(4, round(np.sqrt(area * ratio)))))
        ch = int(min(hw, max(4, round(np.sqrt(area / ratio)))))
        y0, x0 = rng.integers(0, hw - ch + 1), rng.integers(0, hw - cw + 1)
        # bilinear resize of the crop to hw x hw: source coordinates of each output row / column
        ys = np.clip(y0 + (np.arange(hw) + 0.5) * ch / hw - 0.5, y0, y0 + ch - 1)
        xs = np.clip(x0 + (np.arange(hw) + 0.5) * cw / hw - 0.5, x0, x0 + cw - 1)
        if rng.random() < 0.5:  # horizontal flip: the columns read right to left
            xs = xs[::-1]
        iy, ix = ys.astype(np.int64), xs.astype(np.int64)
        iy1, ix1 = np.minimum(iy + 1, hw - 1), np.minimum(ix + 1, hw - 1)
        wy = (ys - iy).astype(np.float32)[:, None]
        wx = (xs - ix).astype(np.float32)
        top = img[:, iy].astype(np.float32)  # rows first, then columns
        rows = img[:, iy1].astype(np.float32)
        rows -= top
        rows *= wy
        rows += top
        out = rows.take(ix1, 2)
        left = rows.take(ix, 2)
        out -= left
        out *= wx
        out += left
        luma = np.array([0.299, 0.587, 0.114], np.float32)
        if rng.random() < 0.8:  # colour jitter, its three parts in a random order
            for j in rng.permutation(3):
                f = np.float32(rng.uniform(0.6, 1.4))
                if j == 0:  # brightness
                    out *= f
                elif j == 1:  # contrast, about the mean level
                    m = out.mean()
                    out -= m
                    out *= f
                    out += m
                else:  # saturation, about each pixel's grey
                    g = (luma @ out.reshape(3, -1)).reshape(1, hw, hw)
                    out -= g
                    out *= f
                    out += g
        if rng.random() < 0.2:  # grayscale
            out = np.repeat((luma @ out.reshape(3, -1)).reshape(1, hw, hw), 3, axis=0)
        sigma = rng.uniform(0.1, 2.0)  # a 3x3 Gaussian blur, separable: [k0, k1, k0] each way
        k0 = np.float32(np.exp(-0.5 / sigma**2))
        k0, k1 = k0 / (1 + 2 * k0), np.float32(1) / (1 + 2 * k0)
        across = out * k1  # edge pixels repeated past the border
        across[:, :, 1:] += out[:, :, :-1] * k0
        across[:, :, :-1] += out[:, :, 1:] * k0
        across[:, :, [0, -1]] += out[:, :, [0, -1]] * k0
        out = across * k1
        out[:, 1:] += across[:, :-1] * k0
        out[:, :-1] += across[:, 1:] * k0
        out[:, [0, -1]] += across[:, [0, -1]] * k0
        np.clip(out, 0, 255, out=out)
        return out.astype(np.uint8)

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        img = self.images[i % len(self.images)]
        return torch.from_numpy(np.stack([self._view(img, rng), self._view(img, rng)]))


def _simclr(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.data import DataLoader

    torch, nn, F = k.torch, k.nn, k.F
    hw, batch, div, workers, pool = (24, 4, 16, 2, 8) if k.quick else (96, 256, 1, 6, 512)
    # 512 views of 96x96: 2.6 GFLOP (fwd) a view, 5.1 TFLOP a step (FlopCounter), plus ~150 GB
    # of BatchNorm / ReLU traffic at 96x96 and 48x48: ~80-130 ms in bf16 eager NCHW; ~250
    # kernels a step. Augmenting: ~1.2 x v105's per-sample cost on the same CPU, so ~1.25 ms a
    # sample on the device (v105: ~1 ms): ~0.32 s a batch with 0 workers (~3 x the GPU step),
    # ~55 ms a batch spread over 6 workers.
    stem, card = max(8, 64 // div), 8
    outs = [max(16, c // div) for c in (128, 256, 512, 1024)]

    class Bottleneck(nn.Module):  # ResNeXt: 1x1 reduce, grouped 3x3 (cardinality 8), 1x1 expand
        def __init__(self, ci: int, co: int, stride: int) -> None:
            super().__init__()
            mid = co // 2
            self.body = nn.Sequential(
                nn.Conv2d(ci, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                nn.Conv2d(mid, mid, 3, stride, 1, groups=card, bias=False), nn.BatchNorm2d(mid),
                nn.ReLU(), nn.Conv2d(mid, co, 1, bias=False), nn.BatchNorm2d(co),
            )  # fmt: skip
            self.short = nn.Sequential(nn.Conv2d(ci, co, 1, stride, bias=False), nn.BatchNorm2d(co))

        def forward(self, x):
            return F.relu(self.body(x) + self.short(x))

    class SimCLR(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            mods: list = [nn.Conv2d(3, stem, 3, 1, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU()]
            ci = stem
            for co, s in zip(outs, (1, 2, 2, 2), strict=True):
                mods.append(Bottleneck(ci, co, s))
                ci = co
            self.encoder = nn.Sequential(*mods, nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.head = nn.Sequential(nn.Linear(ci, ci // 2), nn.ReLU(), nn.Linear(ci // 2, 128))

        def forward(self, x):
            return self.head(self.encoder(x))

    model = SimCLR().to(device)
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True, "prefetch_factor": 4}
    loader = DataLoader(
        TwoViews(hw, pool), batch_size=batch, shuffle=True, drop_last=True,
        **(kw if fixed else {}),
    )  # fmt: skip
    it = iter(loader)
    mean = torch.tensor([0.5, 0.5, 0.5], device=device)[:, None, None]
    eye = torch.eye(2 * batch, dtype=torch.bool, device=device)
    target = torch.cat([torch.arange(batch) + batch, torch.arange(batch)]).to(device)

    def loss_fn():
        views = next(it).to(device)  # (batch, 2, 3, hw, hw) uint8
        x = (torch.cat([views[:, 0], views[:, 1]]).float() / 255 - mean) / 0.25
        with k.ac:
            z = model(x)
        z = F.normalize(z.float(), dim=1)
        sim = (z @ z.t() / 0.5).masked_fill(eye, -1e9)  # NT-Xent at temperature 0.5
        return F.cross_entropy(sim, target)

    k.meta["num_workers"] = workers if fixed else 0
    return k.train(opt, loss_fn), batch, model


def _particlenet(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    parts, feats, knn, batch, div = (16, 16, 4, 8, 8) if k.quick else (128, 16, 16, 4096, 1)
    # 4096 jets x 128 particles x 16 neighbours = 8.4 M edges; per edge 448 ch (64+128+256) of
    # bf16 read or written ~12 times (gather, add, ReLU, mean and their backward): ~90 GB of
    # traffic, ~40-50 ms on an H100 (0.83 TFLOP of 1x1 convs and kNN matmuls: a few ms); ~240
    # kernels a step. The 35.7 MB copied from pageable memory: ~4-5 ms (v106: 65.5 MB cost
    # ~8 ms), ~10 % of the step.
    widths = [max(8, c // div) for c in (64, 128, 256)]

    class EdgeConv(nn.Module):
        """ReLU(theta x_i + phi (x_j - x_i)) averaged over the k nearest neighbours j of each
        particle i in feature space (the edge map split into per-particle terms, then gathered);
        a 1x1 conv, BatchNorm and ReLU after; a 1x1 conv-BN shortcut."""

        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.theta, self.phi = nn.Conv1d(ci, co, 1), nn.Conv1d(ci, co, 1, bias=False)
            self.bn1, self.bn2 = nn.BatchNorm1d(co), nn.BatchNorm1d(co)
            self.conv = nn.Conv1d(co, co, 1, bias=False)
            self.short = nn.Sequential(nn.Conv1d(ci, co, 1, bias=False), nn.BatchNorm1d(co))

        def forward(self, x, far):  # x (b, c, p); far (b, 1, p): 1e9 at padded particles
            b, _, p = x.shape
            with torch.no_grad():  # the k nearest particles in feature space
                xf = x.float()
                sq = (xf * xf).sum(1, keepdim=True)
                d2 = sq.transpose(1, 2) + sq - 2 * xf.transpose(1, 2) @ xf + far
                idx = d2.topk(knn, dim=2, largest=False).indices  # (b, p, k)
            nb = self.phi(x)  # (b, co, p)
            own = self.theta(x) - nb
            co = nb.shape[1]
            flat = idx.reshape(b, 1, p * knn).expand(b, co, p * knn)
            e = nb.gather(2, flat).view(b, co, p, knn)  # in place after: one edge tensor
            e = torch.relu_(e.add_(own[..., None])).mean(3)
            y = F.relu(self.bn2(self.conv(F.relu(self.bn1(e)))))
            return F.relu(y + self.short(x))

    class ParticleNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn_in = nn.BatchNorm1d(feats)
            ci, blocks = feats, []
            for co in widths:
                blocks.append(EdgeConv(ci, co))
                ci = co
            self.blocks = nn.ModuleList(blocks)
            self.head = nn.Sequential(nn.Linear(ci, max(8, 128 // div)), nn.ReLU())
            self.out = nn.Linear(max(8, 128 // div), 10)

        def forward(self, x, mask):  # x (b, feats, p), mask (b, 1, p) of 0/1
            far = (1 - mask) * 1e9
            h = self.bn_in(x) * mask
            for blk in self.blocks:
                h = blk(h, far) * mask
            pooled = h.sum(2) / mask.sum(2).clamp(min=1)
            return self.out(self.head(pooled))

    model = ParticleNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(121)
    pool = []
    for _ in range(3):
        n = torch.randint(parts // 4, parts + 1, (batch, 1, 1), generator=gen)
        mask = (torch.arange(parts).view(1, 1, parts) < n).float()
        x = torch.randn(batch, feats, parts, generator=gen) * mask
        pool.append((x, mask, torch.randint(0, 10, (batch,), generator=gen)))
    next_batch = cycled(pool, device, pinned=fixed and k.cuda)

    def loss_fn():
        x, mask, y = next_batch()
        with k.ac:
            return F.cross_entropy(model(x, mask).float(), y)

    k.meta["bytes_per_step"] = batch * (feats * parts * 4 + parts * 4 + 8)
    k.meta["pinned"] = fixed
    return k.train(opt, loss_fn), batch, model


def _retinanet(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    img, batch, div, fpn = (64, 2, 16, 16) if k.quick else (256, 32, 1, 128)
    classes, anchors = 20, 9
    # 0.28 TFLOP forward, 0.84 a step (FlopCounter: backbone, FPN, the subnets' 8 3x3 convs and
    # 2 outputs over 1344 positions of each image), ~10-13 ms in bf16 eager NCHW with the focal
    # loss over 7.7 M logits; ~550 kernels a step (~5 ms of launches): the GPU busy most of the
    # step.
    w = [max(4, c // div) for c in (64, 128, 256, 512)]

    def cbn(ci: int, co: int, s: int = 1, ks: int = 3):
        return [nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co)]

    def subnet(out: int, prior: float = 0.0):
        layers: list = []
        for _ in range(4):
            layers += [nn.Conv2d(fpn, fpn, 3, 1, 1), nn.ReLU()]
        last = nn.Conv2d(fpn, out, 3, 1, 1)
        nn.init.constant_(last.bias, prior)
        return nn.Sequential(*layers, last)

    class RetinaNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(*cbn(3, w[0], 2), nn.ReLU())  # stride 2
            stages, ci = [], w[0]
            for co in w:  # strides 4, 8, 16, 32
                stages.append(nn.Sequential(basic_block(ci, co, 2), basic_block(co, co, 1)))
                ci = co
            self.stages = nn.ModuleList(stages)
            self.lateral = nn.ModuleList([nn.Conv2d(c, fpn, 1) for c in w[1:]])
            self.smooth = nn.ModuleList([nn.Conv2d(fpn, fpn, 3, 1, 1) for _ in w[1:]])
            self.cls = subnet(anchors * classes, -4.595)  # prior 0.01
            self.box = subnet(anchors * 4)

        def forward(self, x):
            feats = []
            x = self.stem(x)
            for st in self.stages:
                x = st(x)
                feats.append(x)
            c3, c4, c5 = feats[1:]
            p5 = self.lateral[2](c5)
            p4 = self.lateral[1](c4) + F.interpolate(p5, scale_factor=2.0)
            p3 = self.lateral[0](c3) + F.interpolate(p4, scale_factor=2.0)
            levels = [s(p) for s, p in zip(self.smooth, (p3, p4, p5), strict=True)]
            b = x.shape[0]
            cls = torch.cat(
                [self.cls(p).permute(0, 2, 3, 1).reshape(b, -1, classes) for p in levels], 1
            )
            box = torch.cat([self.box(p).permute(0, 2, 3, 1).reshape(b, -1, 4) for p in levels], 1)
            return cls, box

    model = RetinaNet().to(device)
    opt = k.adamw(model, fused=k.cuda)
    n_anchors = anchors * sum((img // s) ** 2 for s in (8, 16, 32))
    gen = torch.Generator().manual_seed(122)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    pos_h = torch.rand(batch, n_anchors, generator=gen) < 0.01
    onehot = F.one_hot(torch.randint(0, classes, (batch, n_anchors), generator=gen), classes)
    cls_t = (onehot * pos_h[..., None]).float().to(device)
    pos = pos_h.to(device)
    box_t = torch.randn(batch, n_anchors, 4, generator=gen).to(device)
    posf = pos.float()
    tot = torch.zeros((), device=device)
    seen: list[float] = []

    def smooth_l1(d, beta: float = 1 / 9):
        a = d.abs()
        return torch.where(a < beta, 0.5 * a * a / beta, a - 0.5 * beta)

    def step():
        with k.ac:
            cls, box = model(x)
        cls, box = cls.float(), box.float()
        p = torch.sigmoid(cls)
        ce = F.binary_cross_entropy_with_logits(cls, cls_t, reduction="none")
        p_t = p * cls_t + (1 - p) * (1 - cls_t)
        alpha = 0.25 * cls_t + 0.75 * (1 - cls_t)
        focal = (alpha * (1 - p_t) ** 2 * ce).sum()
        err = box - box_t
        if fixed:  # the count, the selection and the log stay on the GPU
            norm = pos.sum().clamp(min=1).float()
            box_loss = (smooth_l1(err).sum(2) * posf).sum()
        else:  # planted: the count read by .item(), the positives picked by a boolean mask
            norm = max(1, int(pos.sum().item()))
            box_loss = smooth_l1(err[pos]).sum()
        loss = (focal + box_loss) / norm
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if fixed:
            tot.add_(loss.detach())
        else:
            seen.append(loss.item())

    k.meta["anchors_per_image"] = n_anchors
    k.meta["syncs_per_step"] = 0 if fixed else 3
    return step, batch, model


def _schnet(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    atoms, d, rbf, blocks, batch = (6, 8, 10, 3, 2) if k.quick else (24, 64, 50, 3, 16)
    cutoff, types = 5.0, 10
    # 16 x 24 x 24 = 9216 atom pairs: each kernel a few microseconds of GPU time; ~130 kernels
    # a step with the optimizer's (~110 forward and backward): ~2.5-4 ms of host launches (v108:
    # ~24 us a kernel, Python included), the GPU idle most of it; a replayed graph ~0.3 ms.
    log2, gamma = (
        math.log(2.0),
        0.5 / (cutoff / (rbf - 1)) ** 2,
    )  # RBF centres cutoff / (rbf - 1) apart

    def ssp(x):  # shifted softplus
        return F.softplus(x) - log2

    class Interaction(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.f1, self.f2 = nn.Linear(rbf, d), nn.Linear(d, d)  # the filter network
            self.in2f = nn.Linear(d, d, bias=False)
            self.f2out, self.dense = nn.Linear(d, d), nn.Linear(d, d)

        def forward(self, h, e, fc):  # h (b, n, d); e (b, n, n, rbf); fc (b, n, n, 1)
            w = self.f2(ssp(self.f1(e))) * fc  # continuous filters, cut off
            xj = self.in2f(h)
            m = (w * xj[:, None, :, :]).sum(2)  # dense all-pairs messages
            return h + self.dense(ssp(self.f2out(m)))

    class SchNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(types, d)
            self.blocks = nn.ModuleList([Interaction() for _ in range(blocks)])
            self.o1, self.o2 = nn.Linear(d, d // 2), nn.Linear(d // 2, 1)
            self.register_buffer("mu", torch.linspace(0, cutoff, rbf))

        def forward(self, z, pos):
            with torch.no_grad():  # distances, their RBF expansion and the cutoff
                dist = (pos[:, :, None] - pos[:, None]).pow(2).sum(-1).add(1e-9).sqrt()
                e = torch.exp(-gamma * (dist[..., None] - self.mu) ** 2)
                off = 1 - torch.eye(dist.shape[1], device=dist.device)  # no self-pairs
                fc = 0.5 * (torch.cos(dist * (torch.pi / cutoff)) + 1) * (dist < cutoff) * off
                fc = fc[..., None]
            h = self.embed(z)
            for blk in self.blocks:
                h = blk(h, e, fc)
            return self.o2(ssp(self.o1(h))).squeeze(-1).sum(1)  # energy per molecule

    model = SchNet().to(device)
    opt = k.adamw(model, capturable=True) if k.cuda else k.adamw(model)
    gen = torch.Generator().manual_seed(123)
    z = torch.randint(0, types, (batch, atoms), generator=gen).to(device)
    pos = (torch.rand(batch, atoms, 3, generator=gen) * 6).to(device)
    energy = torch.randn(batch, generator=gen).to(device)

    def loss_fn():
        return F.mse_loss(model(z, pos), energy)

    step = whole_step_graph(k, opt, loss_fn, k.train(opt, loss_fn), fixed)
    k.meta["interaction_blocks"] = blocks
    return step, batch, model


def _repvgg(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cudnn.benchmark = fixed
    img, batch, div = (32, 2, 16) if k.quick else (128, 256, 1)
    # 1.9 GFLOP an image forward, 1.43 TFLOP a step (FlopCounter), ~15-25 ms of TF32
    # convolutions and BatchNorm; ~220 kernels a step (~2-3 ms of launches): the GPU busy most
    # of the step (at batch 32 it would be launch-bound).
    stages = [(max(4, c // div), n) for c, n in ((64, 1), (128, 2), (256, 4), (512, 1))]

    class RepBlock(nn.Module):  # training form: 3x3 conv-BN + 1x1 conv-BN + identity BN, ReLU
        def __init__(self, ci: int, co: int, stride: int) -> None:
            super().__init__()
            self.k3 = nn.Sequential(nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co))
            self.k1 = nn.Sequential(nn.Conv2d(ci, co, 1, stride, bias=False), nn.BatchNorm2d(co))
            self.ident = nn.BatchNorm2d(co) if (ci == co and stride == 1) else None

        def forward(self, x):
            y = self.k3(x) + self.k1(x)
            return F.relu(y if self.ident is None else y + self.ident(x))

    mods: list = []
    ci = 3
    for co, n in stages:
        for i in range(n):
            mods.append(RepBlock(ci, co, 2 if i == 0 else 1))
            ci = co
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, 100)]
    model = nn.Sequential(*mods).to(device)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 3, img, img, device=device)
    y = torch.randint(0, 100, (batch,), device=device)
    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    return k.train(opt, lambda: F.cross_entropy(model(x), y)), batch, model


BUILDERS = {
    "v120": _simclr,
    "v121": _particlenet,
    "v122": _retinanet,
    "v123": _schnet,
    "v124": _repvgg,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
