"""The tenth blind part's cases v165-v169 (record_blind10.py merges them): an Informer-style
long-sequence forecaster of 862 traffic sensors fed 128 MB of fp32 windows a step from pageable
memory (pinning, v165); PointPillars-style LiDAR detection whose scans are augmented (pasted
database cars, per-object and global noise), cut into pillars and given anchor targets per sample
in numpy in the Dataset (DataLoader workers, v166); a YOLO-style detector whose YOLOv5 loss picks
its target-anchor pairs by boolean masks, three syncs per output level, and logs its three losses
by .item() (host syncs, v167); cudnn.benchmark on the dilated convolutions of a DeepLab-style
segmenter at output stride 8 in fp32 with cuDNN TF32 (v168); and an 8 x batch on a Hyena-style
long-convolution language model whose narrow layers of small kernels leave the GPU idle at 2
sequences (v169). Each family is one no earlier case used. Each builder: (kit, fixed, device,
rank) -> (step_fn, samples_per_step, model); planted and fixed build the same model from the same
seed and differ only in the planted thing. Sizes come from FLOP, byte and launch counts (FLOPs
checked with torch's FlopCounterMode on the meta device; not timed: nothing here ran on a GPU
before the part was fixed); each builder's comment gives its estimate of one step on an H100, with
the host time at ~10 and ~25 us an eager launch (the earlier parts' recordings ran nearer the
second where the host set the pace)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit, cycled  # noqa: E402

CASES: dict[str, dict] = {
    "v165": {
        "name": "pin_memory",
        "model": "Informer-style long-sequence time-series forecaster (862 traffic sensors; a "
        "circular width-3 Conv1d token embedding to d 512, fixed sinusoidal positions and a "
        "Linear embedding of 4 time features; 2 encoder layers of ProbSparse self-attention (8 "
        "heads, factor 5: 5 ln L sampled keys score each query, only the top 5 ln L queries "
        "attend, the rest take the mean of the values) with a distilling Conv1d, BatchNorm, ELU "
        "and stride-2 max pool between them, 192 then 96 steps; 1 decoder layer of masked "
        "ProbSparse self-attention and full cross-attention over 96 known and 96 zero "
        "placeholder steps; 1x1 Conv1d feed-forward 2048 with GELU, LayerNorm, dropout 0.05; "
        "Linear back to 862 sensors, MSE on the 96 predicted steps; Adam(fused=True)) on "
        "windows of 192 input and 192 target steps, batch 96, bf16 autocast",
        "planted": "128 MB per step (fp32 sensor windows and time features) in pageable host "
        "memory, copied with non_blocking=True (a synchronous staged copy)",
        "fix": "the same batches pinned once (page-locked), copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v166": {
        "name": "dataloader_workers",
        "model": "PointPillars-style LiDAR car detector (a pillar feature net: each pillar's up "
        "to 32 points decorated with their offsets from the pillar's point mean and centre to "
        "10 features, Linear 10-64, BatchNorm and ReLU, max over the points; the 8000 pillars "
        "scattered to a 256x256 bird's-eye canvas of 0.2 m cells; a SECOND-style backbone of "
        "3 blocks of 4/6/6 3x3 convs, 64/128/256 ch, each block strided 2, transposed convs to "
        "128 ch at 128x128, concatenated; a single-shot anchor head of 2 rotations a cell: "
        "sigmoid focal loss, smooth L1 on the box with the sine-difference angle, a 2-bin "
        "direction cross-entropy) on batch 16 scans, bf16 autocast; each scan made per sample "
        "in numpy in the Dataset from a stored 20000-point scan: up to 8 database cars pasted "
        "where they do not collide and the points inside them removed, each box and its points "
        "rotated and shifted a little, a global flip, rotation and scaling, range cropping and "
        "shuffling, pillars by sorting the points' cell indices, anchor targets by "
        "bird's-eye-view IoU around each box; elementwise numpy, sorts and gathers only, no BLAS",
        "planted": "DataLoader(num_workers=0): the augmentation, pillars and targets are made in "
        "the training process",
        "fix": "DataLoader(num_workers=6, persistent_workers=True)",
        "expected_fix": "dataloader_workers",
    },
    "v167": {
        "name": "host_sync",
        "model": "YOLO-style one-stage detector (YOLOv5s: a CSP-Darknet backbone of a 6x6 "
        "stride-2 stem, strided 3x3 convs and C3 blocks of 1/2/3/1 bottlenecks, 32-512 ch, and "
        "SPPF; a PANet neck of C3 blocks, nearest 2x upsampling and concatenation; 1x1 detect "
        "convs at strides 8/16/32, 3 anchors a cell, 80 classes; every conv with BatchNorm and "
        "SiLU; the YOLOv5 loss: each target matched to the anchors within a 4x size ratio and "
        "to its cell and the two nearest neighbour cells, CIoU box loss, BCE objectness to the "
        "IoU (the largest where targets share a cell) and BCE classes, balanced 4/1/0.4 over "
        "the levels; SGD momentum 0.937, Nesterov) on 640x640 images with 7 boxes each, batch "
        "32, bf16 autocast: the model GPU-bound, the loss hundreds of small kernels",
        "planted": "12 syncs per step: at each of the 3 levels the target-anchor pairs within "
        "the size ratio, their cell and neighbour copies and the copies' offsets picked by "
        "boolean masks (a nonzero each), and the running box, objectness and class losses read "
        "by .item() for the log",
        "fix": "the same loss over every target-anchor-cell candidate with a 0/1 weight and the "
        "candidate count kept on the GPU, the running losses kept on the GPU, none read in the "
        "step",
        "expected_fix": "host_sync",
    },
    "v168": {
        "name": "cudnn_benchmark",
        "model": "DeepLab-style semantic segmenter (DeepLabv3 at output stride 8: a ResNet-style "
        "basic-block backbone, a 7x7 stride-2 stem 64 ch and 3x3 max pool, 64/128 ch blocks at "
        "1/4 and 1/8, then 256 ch blocks dilated 2 and 3 blocks of 512 ch dilated 4/8/16 "
        "(multi-grid 1/2/4) at 1/8; ASPP of a 1x1 conv, 3x3 convs dilated 12/24/36 and image "
        "pooling, 256 ch each, concatenated, a 1x1 projection and dropout 0.5; a 3x3 conv and a "
        "1x1 conv to 21 classes, bilinear 8x to the image, cross-entropy with 255 ignored; "
        "BatchNorm and ReLU) on 448x448 crops, batch 8, fp32 with cuDNN TF32 (TF32 off for "
        "matmuls): 30 convolutions, 13 of them dilated",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True",
        "expected_fix": "cudnn_benchmark",
    },
    "v169": {
        "name": "batch_size",
        "model": "Hyena-style long-convolution language model (vocab 8192 tied to the LM head; "
        "6 pre-LayerNorm blocks d 256, each a Hyena operator of order 2: a Linear to 3 x 256, a "
        "width-3 depthwise causal Conv1d, the gates and the value multiplied in turn around a "
        "sequence-long causal convolution by FFT whose filter an implicit MLP (positions to 64, "
        "3 sine layers, to 256, exponentially decaying) makes each step, a bias skip and an "
        "output Linear; then an MLP 1024 with GELU) on sequences of 1024 tokens, bf16 autocast, "
        "AdamW(fused=True): some 750 small kernels a step, the GPU idle between launches",
        "planted": "batch 2",
        "fix": "batch 16 (8 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 8,
    },
}


def _informer(k: Kit, fixed: bool, device: str, rank: int):
    # H100: per window 2.3 GMAC forward (the two circular width-3 token embeddings from 862
    # sensors 0.51, the encoder layers at 192 and 96 steps 0.61 and 0.31, the distilling conv
    # 0.15, the decoder layer 0.78, the projection to 862 0.09), x 96 x 2 x 3 = 1.31 TFLOP a
    # step (FlopCounter) of bf16 matmuls and convs, ~5-7 ms; ~12 GB of LayerNorm, GELU, dropout,
    # residual, the ProbSparse key samples (96 x 8 x 192 x 30 x 64 each) and scatter traffic,
    # ~5-6 ms: ~11-13 ms of GPU against ~190 kernels forward and ~300 backward (~5 ms of host
    # at 10 us a launch, ~12 at 25). The 128 MB a step from pageable memory: ~13-17 ms (v151:
    # 153 MB ~19 ms more than pinned), the host blocked and the GPU idle meanwhile; pinned ~4-5
    # ms on the copy engine in stream order, the host free to run ahead: ~26-30 ms planted,
    # ~16-18 fixed, ~35-45 % off
    torch, nn, F = k.torch, k.nn, k.F
    sensors, seq, label, pred, d, heads, ff, batch = (
        (12, 24, 12, 12, 32, 4, 64, 4) if k.quick else (862, 192, 96, 96, 512, 8, 2048, 96)
    )
    factor, drop, marks = 5, 0.05, 4

    class ProbAttention(nn.Module):  # ProbSparse attention; (b, h, l, e) in and out
        def __init__(self, masked: bool) -> None:
            super().__init__()
            self.masked = masked

        def forward(self, q, kk, v):
            b, h, lq, e = q.shape
            lk = kk.shape[2]
            part = min(factor * math.ceil(math.log(lk)), lk)
            top = min(factor * math.ceil(math.log(lq)), lq)
            # each query scored on `part` keys sampled at random (drawn on the device, gathered
            # from the keys themselves rather than from an expanded copy)
            idx = torch.randint(lk, (lq, part), device=q.device)
            sample = kk[:, :, idx]  # (b, h, lq, part, e)
            qk = (q.unsqueeze(-2) @ sample.transpose(-2, -1)).squeeze(-2)
            sparsity = qk.max(-1)[0] - qk.sum(-1) / lk
            m_top = sparsity.topk(top, sorted=False)[1]  # (b, h, top) the active queries
            q_red = torch.gather(q, 2, m_top[..., None].expand(-1, -1, -1, e))
            scores = q_red @ kk.transpose(-2, -1) / math.sqrt(e)  # (b, h, top, lk)
            if self.masked:  # the lazy queries take the running sum of the values
                ctx = v.cumsum(2)
                later = torch.arange(lk, device=q.device) > m_top[..., None]
                scores = scores.masked_fill(later, float("-inf"))
            else:  # the lazy queries take the mean of the values
                ctx = v.mean(2, keepdim=True).expand(b, h, lq, e).clone()
            out = torch.softmax(scores, -1) @ v
            return ctx.scatter(2, m_top[..., None].expand(-1, -1, -1, e), out.to(ctx.dtype))

    class FullAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop = nn.Dropout(drop)

        def forward(self, q, kk, v):
            att = torch.softmax(q @ kk.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
            return self.drop(att) @ v

    class AttentionLayer(nn.Module):  # projections around an inner attention
        def __init__(self, inner, mix: bool) -> None:
            super().__init__()
            self.inner, self.mix = inner, mix
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

        def forward(self, x, src):
            b, lq, _ = x.shape
            q = self.q(x).view(b, lq, heads, -1).transpose(1, 2)
            kk = self.k(src).view(b, src.shape[1], heads, -1).transpose(1, 2)
            v = self.v(src).view(b, src.shape[1], heads, -1).transpose(1, 2)
            out = self.inner(q, kk, v)  # (b, h, lq, e)
            if self.mix:  # Informer's decoder self-attention: heads and steps mixed by a view
                return self.o(out.contiguous().view(b, lq, -1))
            return self.o(out.transpose(1, 2).reshape(b, lq, -1))

    class FeedForward(nn.Module):  # 1x1 Conv1d d-ff-d with GELU and dropout
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = nn.Conv1d(d, ff, 1), nn.Conv1d(ff, d, 1)
            self.drop = nn.Dropout(drop)

        def forward(self, x):
            y = self.drop(F.gelu(self.c1(x.transpose(1, 2))))
            return self.drop(self.c2(y).transpose(1, 2))

    class EncoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = AttentionLayer(ProbAttention(False), False)
            self.ff, self.n1, self.n2 = FeedForward(), nn.LayerNorm(d), nn.LayerNorm(d)
            self.drop = nn.Dropout(drop)

        def forward(self, x):
            x = self.n1(x + self.drop(self.attn(x, x)))
            return self.n2(x + self.ff(x))

    class Distil(nn.Module):  # circular width-3 conv, BatchNorm, ELU, stride-2 max pool
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(d, d, 3, padding=1, padding_mode="circular")
            self.bn, self.pool = nn.BatchNorm1d(d), nn.MaxPool1d(3, 2, 1)

        def forward(self, x):
            return self.pool(F.elu(self.bn(self.conv(x.transpose(1, 2))))).transpose(1, 2)

    class DecoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn = AttentionLayer(ProbAttention(True), True)
            self.cross = AttentionLayer(FullAttention(), False)
            self.ff = FeedForward()
            self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.drop = nn.Dropout(drop)

        def forward(self, x, mem):
            x = self.n1(x + self.drop(self.self_attn(x, x)))
            x = self.n2(x + self.drop(self.cross(x, mem)))
            return self.n3(x + self.ff(x))

    class Embedding(nn.Module):  # token conv + fixed positions + time features
        def __init__(self) -> None:
            super().__init__()
            self.token = nn.Conv1d(sensors, d, 3, padding=1, padding_mode="circular", bias=False)
            nn.init.kaiming_normal_(self.token.weight, mode="fan_in", nonlinearity="leaky_relu")
            self.time = nn.Linear(marks, d, bias=False)
            pos = torch.arange(seq)[:, None] * torch.exp(
                torch.arange(0, d, 2) * (-math.log(10000.0) / d)
            )
            self.register_buffer("pos", torch.stack([pos.sin(), pos.cos()], 2).flatten(1))
            self.drop = nn.Dropout(drop)

        def forward(self, x, mark):
            tok = self.token(x.transpose(1, 2)).transpose(1, 2)
            return self.drop(tok + self.pos[: x.shape[1]] + self.time(mark))

    class Informer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc_embed, self.dec_embed = Embedding(), Embedding()
            self.encoder = nn.ModuleList([EncoderLayer(), EncoderLayer()])
            self.distil = Distil()
            self.enc_norm = nn.LayerNorm(d)
            self.decoder = DecoderLayer()
            self.dec_norm = nn.LayerNorm(d)
            self.proj = nn.Linear(d, sensors)

        def forward(self, x_enc, mark_enc, x_dec, mark_dec):
            e = self.encoder[0](self.enc_embed(x_enc, mark_enc))
            e = self.enc_norm(self.encoder[1](self.distil(e)))
            y = self.dec_norm(self.decoder(self.dec_embed(x_dec, mark_dec), e))
            return self.proj(y)[:, -pred:]

    model = Informer().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=k.cuda)
    gen = torch.Generator().manual_seed(165)
    sensor_level = torch.rand(sensors, generator=gen)
    daily, weekly = torch.rand(2, sensors, generator=gen) * torch.tensor([[0.8], [0.3]])
    phase = torch.rand(2, sensors, generator=gen) * 2 * math.pi
    pool = []
    for _ in range(2):  # 2 host batches used in turn: hourly occupancy, daily and weekly cycles
        start = torch.randint(0, 17544 - 2 * seq, (batch, 1), generator=gen)
        hours = (start + torch.arange(seq + pred)).float()  # (batch, steps)
        t = hours[..., None]
        occ = sensor_level + daily * torch.sin(2 * math.pi * t / 24 + phase[0])
        occ = occ + weekly * torch.sin(2 * math.pi * t / 168 + phase[1])
        occ = occ + 0.1 * torch.randn(occ.shape, generator=gen)
        days = hours // 24  # the time features: hour, weekday, day of month and of year
        feats = torch.stack([hours % 24 / 23, days % 7 / 6, days % 30 / 29, days % 365 / 364], 2)
        feats = feats - 0.5  # in [-0.5, 0.5]
        pool.append(
            (
                occ[:, :seq].contiguous(),
                occ[:, seq - label :].contiguous(),  # the decoder's known and target steps
                feats[:, :seq].contiguous(),
                feats[:, seq - label :].contiguous(),
            )
        )
    next_batch = cycled(pool, device, pinned=fixed and k.cuda)

    def loss_fn():
        x, y, mx, my = next_batch()
        dec_in = torch.cat([y[:, :label], torch.zeros_like(y[:, label:])], 1)
        with k.ac:
            out = model(x, mx, dec_in, my)
        return F.mse_loss(out.float(), y[:, label:])

    k.meta["bytes_per_step"] = sum(t.numel() * t.element_size() for t in pool[0])
    k.meta["pinned"] = fixed
    return k.train(opt, loss_fn), batch, model


class LidarPillars:
    """v166's dataset: ``pool`` stored LiDAR scans of ``points`` points (rows x, y, z, intensity;
    a ground log-uniform in range from the sensor, 4-8 cars of points on their box faces) with
    their car boxes (x, y, z, l, w, h, yaw), and a database of 64 cars' points in their own
    frames, all made once; ``1_000_000`` virtual samples cycling over the scans. Per sample (numpy,
    seeded by the index; elementwise work, sorts and gathers, no BLAS), as SECOND's and
    PointPillars' data pipelines: up to 8 database cars pasted where no box lies within 5 m (the
    scan's points inside each removed), every box and its points rotated by up to pi/20 and
    shifted by N(0, 0.25 m), a global flip (p 0.5), rotation (up to pi/4) and scaling
    (0.95-1.05), the points cropped to the ``grid`` x ``grid`` cells of ``voxel`` m and
    shuffled, cut into pillars (the points sorted by cell, the first ``max_pillars`` cells in
    order of appearance, up to ``max_points`` points each), and anchor targets at half the grid
    (2 anchors a cell, yaw 0 and pi/2, car-sized): each anchor's best bird's-eye IoU (of the
    upright boxes) with a car near it, positive from 0.6, ignored over 0.45, the box encoded
    against the anchor. Returns (voxels (max_pillars, max_points, 4) float32, the pillars' flat
    cells (grid * grid for the padding), their point counts, anchor labels (2, grid/2, grid/2)
    of -1/0/1, box targets (2, 7, grid/2, grid/2))."""

    ANCHOR = (3.9, 1.6, 1.56, -1.0)  # l, w, h and the centre's z of the car anchors

    def __init__(
        self, pool: int, points: int, grid: int, voxel: float, max_pillars: int, max_points: int
    ) -> None:
        import numpy as np

        rng = np.random.default_rng(166)
        self.grid, self.voxel = grid, voxel
        self.max_pillars, self.max_points = max_pillars, max_points
        self.extent = ext = grid * voxel  # x in [0, ext), y in [-ext / 2, ext / 2)
        self.db = []
        for _ in range(64):  # database cars: points on 5 faces of a box centred at 0, yaw 0
            size = rng.uniform([3.4, 1.5, 1.4], [4.6, 1.9, 1.7])
            n = int(rng.integers(60, 400))
            face, u, v = rng.integers(0, 5, n), rng.uniform(-0.5, 0.5, n), rng.uniform(-0.5, 0.5, n)
            x = np.where(face == 0, 0.5, np.where(face == 1, -0.5, u)) * size[0]
            y = np.where(face == 2, 0.5, np.where(face == 3, -0.5, v)) * size[1]
            z = np.where(face == 4, 0.5, np.where(face < 2, v, u)) * size[2]
            car = np.stack([x, y, z, rng.uniform(0, 1, n)]).astype(np.float32)
            self.db.append((size.tolist(), car))
        self.scans, self.boxes = [], []
        for _ in range(pool):
            r = 2.0 * (ext * 0.6) ** rng.uniform(0, 1, points)  # log-uniform: dense near the sensor
            a = rng.uniform(-math.pi / 2, math.pi / 2, points)
            ground = np.stack(
                [r * np.cos(a), r * np.sin(a), rng.normal(-1.7, 0.05, points),
                 rng.uniform(0, 0.3, points)],
            ).astype(np.float32)  # fmt: skip
            cars, boxes = [], []
            for _ in range(int(rng.integers(4, 9))):
                box = self._box(rng, *self.db[int(rng.integers(64))])
                cars.append(box[1])
                boxes.append(box[0])
            self.scans.append(np.concatenate([ground, *cars], 1))
            self.boxes.append(np.array(boxes))

    def _box(self, rng, size, car):  # a car at a random place and yaw: (its box, its points)
        import numpy as np

        ext = self.extent
        x, y = rng.uniform(4, ext - 4), rng.uniform(4 - ext / 2, ext / 2 - 4)
        z, yaw = -1.7 + size[2] / 2, rng.uniform(-math.pi, math.pi)
        c, s = math.cos(yaw), math.sin(yaw)
        p = np.stack([car[0] * c - car[1] * s + x, car[0] * s + car[1] * c + y, car[2] + z, car[3]])
        return [x, y, z, *size, yaw], p.astype(np.float32)

    @staticmethod
    def _inside(pts, box, margin: float):  # the points (columns) inside a rotated box
        import numpy as np

        x, y, z, length, width, height, yaw = (float(v) for v in box)
        c, s = math.cos(yaw), math.sin(yaw)
        dx, dy = pts[0] - x, pts[1] - y
        return (
            (np.abs(dx * c + dy * s) <= length / 2 + margin)
            & (np.abs(dy * c - dx * s) <= width / 2 + margin)
            & (np.abs(pts[2] - z) <= height / 2 + margin)
        )

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        pts, boxes = self.scans[i % len(self.scans)].copy(), list(self.boxes[i % len(self.scans)])
        ext, g, vs = self.extent, self.grid, self.voxel
        for _ in range(8):  # database sampling: cars pasted where they collide with no box
            box, car = self._box(rng, *self.db[int(rng.integers(len(self.db)))])
            centres = np.array(boxes)[:, :2]
            if (np.hypot(centres[:, 0] - box[0], centres[:, 1] - box[1]) < 5.0).any():
                continue
            pts = np.concatenate([pts.compress(~self._inside(pts, box, 0.1), axis=1), car], 1)
            boxes.append(box)
        boxes = np.array(boxes)
        for b in boxes:  # per-object noise: each box and its points rotated and shifted
            idx = np.flatnonzero(self._inside(pts, b, 0.1))
            shift, rot = rng.normal(0, 0.25, 3), rng.uniform(-math.pi / 20, math.pi / 20)
            c, s = math.cos(rot), math.sin(rot)
            q = pts[:, idx]
            dx, dy = q[0] - b[0], q[1] - b[1]
            q[0], q[1] = dx * c - dy * s + b[0] + shift[0], dx * s + dy * c + b[1] + shift[1]
            q[2] += shift[2]
            pts[:, idx] = q
            b[:3] += shift
            b[6] += rot
        if rng.uniform() < 0.5:  # global flip about the x axis
            pts[1], boxes[:, 1], boxes[:, 6] = -pts[1], -boxes[:, 1], -boxes[:, 6]
        rot, scale = rng.uniform(-math.pi / 4, math.pi / 4), rng.uniform(0.95, 1.05)
        c, s = math.cos(rot) * scale, math.sin(rot) * scale
        pts[0], pts[1], pts[2] = pts[0] * c - pts[1] * s, pts[0] * s + pts[1] * c, pts[2] * scale
        bx = boxes[:, 0].copy()
        boxes[:, 0], boxes[:, 1] = bx * c - boxes[:, 1] * s, bx * s + boxes[:, 1] * c
        boxes[:, 2:6] *= scale
        boxes[:, 6] += rot
        keep = (pts[0] >= 0) & (pts[0] < ext) & (np.abs(pts[1]) < ext / 2)
        keep &= (pts[2] > -3) & (pts[2] < 1)
        pts = pts.compress(keep, axis=1)
        pts = pts[:, rng.permutation(pts.shape[1])]
        boxes = boxes[(boxes[:, 0] >= 0) & (boxes[:, 0] < ext) & (np.abs(boxes[:, 1]) < ext / 2)]

        # pillars: the points sorted by cell (ties in shuffled order), the first cells kept
        n = pts.shape[1]
        ix = np.minimum((pts[0] / vs).astype(np.int64), g - 1)
        iy = np.minimum(((pts[1] + ext / 2) / vs).astype(np.int64), g - 1)
        key = np.sort((iy * g + ix) << 20 | np.arange(n))
        cell, order = key >> 20, key & ((1 << 20) - 1)
        start = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
        count = np.diff(np.r_[start, n])
        pillars = np.argsort(order[start])[: self.max_pillars]  # by first appearance
        slot = np.full(len(start), -1)
        slot[pillars] = np.arange(len(pillars))
        pid = np.repeat(np.arange(len(start)), count)
        rank = np.arange(n) - start[pid]
        ok = np.flatnonzero((slot[pid] >= 0) & (rank < self.max_points))
        voxels = np.zeros((self.max_pillars, self.max_points, 4), np.float32)
        voxels[slot[pid[ok]], rank[ok]] = pts[:, order[ok]].T
        cells = np.full(self.max_pillars, g * g)
        cells[: len(pillars)] = cell[start[pillars]]
        counts = np.zeros(self.max_pillars, np.int64)
        counts[: len(pillars)] = np.minimum(count[pillars], self.max_points)

        # anchor targets at half the grid: 2 anchors a cell, the best upright-box IoU near a car
        h, cs = g // 2, 2 * vs
        al, aw, ah, az = self.ANCHOR
        diag = math.hypot(al, aw)
        best = np.zeros((2, h, h), np.float32)
        reg = np.zeros((2, 7, h, h), np.float32)
        for b in boxes.tolist():
            c, s = abs(math.cos(b[6])), abs(math.sin(b[6]))
            bw, bl = b[3] * c + b[4] * s, b[3] * s + b[4] * c  # the upright box's x and y sides
            cx, cy = int(b[0] / cs), int((b[1] + ext / 2) / cs)
            x0, x1, y0, y1 = max(cx - 6, 0), min(cx + 7, h), max(cy - 6, 0), min(cy + 7, h)
            ax = (np.arange(x0, x1) + 0.5) * cs
            ay = (np.arange(y0, y1) + 0.5) * cs - ext / 2
            for a, (ex, ey) in enumerate(((al, aw), (aw, al))):
                ox = np.minimum(ax + ex / 2, b[0] + bw / 2) - np.maximum(ax - ex / 2, b[0] - bw / 2)
                oy = np.minimum(ay + ey / 2, b[1] + bl / 2) - np.maximum(ay - ey / 2, b[1] - bl / 2)
                inter = np.clip(oy, 0, None)[:, None] * np.clip(ox, 0, None)[None, :]
                iou = inter / (ex * ey + bw * bl - inter)
                win, rwin = best[a, y0:y1, x0:x1], reg[a, :, y0:y1, x0:x1]
                upd = iou > win
                win[upd] = iou[upd]
                yy, xx = np.nonzero(upd)
                rwin[0, yy, xx] = (b[0] - ax[xx]) / diag
                rwin[1, yy, xx] = (b[1] - ay[yy]) / diag
                rwin[2:, yy, xx] = np.array(
                    [(b[2] - az) / ah, math.log(b[3] / al), math.log(b[4] / aw),
                     math.log(b[5] / ah), b[6] - a * math.pi / 2], np.float32,
                )[:, None]  # fmt: skip
        labels = np.where(best >= 0.6, 1, np.where(best > 0.45, -1, 0))
        return tuple(torch.from_numpy(t) for t in (voxels, cells, counts, labels, reg))


def _pointpillars(k: Kit, fixed: bool, device: str, rank: int):
    from torch.utils.data import DataLoader

    torch, nn, F = k.torch, k.nn, k.F
    # H100: the backbone at 128x128 / 64x64 / 32x32 (3 x 4/6/6 3x3 convs 64/128/256 ch), the
    # transposed convs and the head: 0.98 TFLOP a step at batch 16 (FlopCounter) of bf16 NCHW
    # convs, ~5-6 ms; the pillar net's (16, 8000, 32, 64) maps (0.5 GB each in bf16) through
    # Linear, BatchNorm, ReLU and max, ~10 GB fwd+bwd, and the backbone's BatchNorm/ReLU/concat
    # traffic (250 M conv outputs a step) ~6.5 GB: ~7 ms; ~12 ms of GPU against ~350 kernels
    # (~3.5-9 ms of host); the 86 MB batch (voxels 66 MB, anchor targets 19 MB) copied from
    # pageable memory, ~10 ms in both variants. Loading: ~8 ms of CPU a scan on the 2-core CPU
    # this was written on (database pasting, per-object noise, cropping and shuffling, pillars
    # and targets about evenly), ~6-10 ms on the device: ~100-160 ms a batch with 0 workers,
    # plus the collation in the training process (86 MB stacked, ~20-50 ms): ~150-230 ms a step
    # planted; spread over 6 workers ~20-35 ms a batch, about even with ~22 ms of copy and GPU:
    # ~25-35 ms fixed, ~80-85 % off the step
    batch, grid, voxel, pillars, per_pillar, points, workers, div = (
        (2, 32, 1.6, 200, 8, 3000, 2, 16) if k.quick else (16, 256, 0.2, 8000, 32, 20000, 6, 1)
    )
    w1, w2, w3, up = (max(4, c // div) for c in (64, 128, 256, 128))
    feat = max(4, 64 // div)

    def cbr(ci: int, co: int, s: int = 1) -> list:
        return [nn.Conv2d(ci, co, 3, s, 1, bias=False), nn.BatchNorm2d(co, 1e-3, 0.01), nn.ReLU()]

    def block(ci: int, co: int, n: int) -> Any:  # a strided conv, then n convs
        return nn.Sequential(*cbr(ci, co, 2), *[m for _ in range(n) for m in cbr(co, co)])

    def deblock(ci: int, s: int) -> Any:
        return nn.Sequential(
            nn.ConvTranspose2d(ci, up, s, s, bias=False), nn.BatchNorm2d(up, 1e-3, 0.01), nn.ReLU()
        )

    class PointPillars(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pfn = nn.Linear(10, feat, bias=False)
            self.pfn_bn = nn.BatchNorm1d(feat, 1e-3, 0.01)
            self.blocks = nn.ModuleList([block(feat, w1, 3), block(w1, w2, 5), block(w2, w3, 5)])
            self.deblocks = nn.ModuleList([deblock(w1, 1), deblock(w2, 2), deblock(w3, 4)])
            self.cls = nn.Conv2d(3 * up, 2, 1)  # 2 anchors a cell, one class
            self.box = nn.Conv2d(3 * up, 2 * 7, 1)
            self.dir = nn.Conv2d(3 * up, 2 * 2, 1)
            nn.init.constant_(self.cls.bias, -math.log((1 - 0.01) / 0.01))

        def forward(self, vox, cells, counts):  # (b, p, n, 4), (b, p), (b, p)
            b, p, n, _ = vox.shape
            mask = torch.arange(n, device=vox.device) < counts[..., None]  # (b, p, n)
            xyz = vox[..., :3]
            mean = xyz.sum(2, keepdim=True) / counts.clamp(min=1)[..., None, None]
            centre = torch.stack(  # each pillar's centre (x, y) and the cells' mid height
                [(cells % grid + 0.5) * voxel, (cells // grid + 0.5) * voxel - grid * voxel / 2,
                 torch.full_like(cells, 0, dtype=vox.dtype) - 1.0], -1,
            )  # fmt: skip
            x = torch.cat([vox, xyz - mean, xyz - centre[:, :, None]], -1) * mask[..., None]
            x = self.pfn(x)  # (b, p, n, feat)
            x = F.relu(self.pfn_bn(x.flatten(0, 1).transpose(1, 2))).amax(2).view(b, p, -1)
            canvas = x.new_zeros(b, x.shape[2], grid * grid + 1)  # the padding in a last cell
            idx = cells[:, None].expand(-1, x.shape[2], -1)
            canvas = canvas.scatter(2, idx, x.transpose(1, 2))[..., :-1]
            y = canvas.view(b, -1, grid, grid)
            ups = []
            for blk, deblk in zip(self.blocks, self.deblocks, strict=True):
                y = blk(y)
                ups.append(deblk(y))
            y = torch.cat(ups, 1)
            h = grid // 2
            return (
                self.cls(y),
                self.box(y).view(b, 2, 7, h, h),
                self.dir(y).view(b, 2, 2, h, h),
            )

    model = PointPillars().to(device)
    opt = k.adamw(model, fused=k.cuda)
    kw = {"num_workers": workers, "persistent_workers": True}
    loader = DataLoader(
        LidarPillars(16, points, grid, voxel, pillars, per_pillar), batch_size=batch,
        shuffle=True, drop_last=True, **(kw if fixed else {}),
    )  # fmt: skip
    it = iter(loader)
    anchor_yaw = torch.tensor([0.0, math.pi / 2], device=device)[None, :, None, None]

    def loss_fn():
        vox, cells, counts, labels, reg = (t.to(device) for t in next(it))
        with k.ac:
            cls, box, dirs = model(vox, cells, counts)
        cls, box, dirs = cls.float(), box.float(), dirs.float()
        pos = (labels > 0).float()
        norm = pos.sum((1, 2, 3), keepdim=True).clamp(min=1)
        cls_w = (labels >= 0).float() / norm  # positives and negatives; ignored anchors out
        p = torch.sigmoid(cls)
        ce = F.binary_cross_entropy_with_logits(cls, pos, reduction="none")
        p_t = pos * p + (1 - pos) * (1 - p)
        focal = (pos * 0.25 + (1 - pos) * 0.75) * (1 - p_t).pow(2) * ce
        # the sine difference of the angles: sin(a - b) split between prediction and target
        rot_p = torch.sin(box[:, :, 6]) * torch.cos(reg[:, :, 6])
        rot_t = torch.cos(box[:, :, 6]) * torch.sin(reg[:, :, 6])
        box_p = torch.cat([box[:, :, :6], rot_p[:, :, None]], 2)
        box_t = torch.cat([reg[:, :, :6], rot_t[:, :, None]], 2)
        l1 = F.smooth_l1_loss(box_p, box_t, reduction="none", beta=1 / 9).sum(2)
        yaw = torch.remainder(reg[:, :, 6] + anchor_yaw - math.pi / 4, 2 * math.pi)
        dir_t = (yaw >= math.pi).long()  # 2 direction bins
        dir_ce = F.cross_entropy(dirs, dir_t, reduction="none")
        reg_w = pos / norm
        b = labels.shape[0]
        return ((focal * cls_w).sum() + 2.0 * (l1 * reg_w).sum() + 0.2 * (dir_ce * reg_w).sum()) / b

    k.meta["num_workers"] = workers if fixed else 0
    k.meta["pillars_per_scan"] = pillars
    return k.train(opt, loss_fn), batch, model


def _yolo(k: Kit, fixed: bool, device: str, rank: int):
    # H100: YOLOv5s at 640x640, 1.55 TFLOP a step at batch 32 (FlopCounter; 8.1 GMAC an image
    # forward) of bf16 NCHW convs, ~8-10 ms; 825 M conv outputs a step through BatchNorm and
    # SiLU (~26 B each fwd+bwd) and the C3 concatenations, ~24 GB, ~10 ms: ~18-22 ms of GPU, ~7
    # forward and ~14 backward. Host: ~1,300 launches a step, ~500 of them the model's (57 convs
    # with BatchNorm and SiLU) and ~700 the loss's forward and backward over the 3 levels (target
    # matching, CIoU, BCEs; each kernel ~2-3 us of GPU) and the foreach SGD: ~13 ms at 10 us a
    # launch, ~32 at 25. Fixed, the host runs ahead and the loss's small kernels run back to
    # back: ~22 ms (GPU-bound) at 10 us, ~32 (host-bound) at 25. Planted, the first mask
    # waits for the forward, then the GPU idles through the loss's host time forward (~300
    # launches and 9 syncs) and backward (~400 launches, the queue empty) before the model's
    # backward; the 3 reads at the end empty the queue again: ~7 + 7 + 14 = ~28 ms at 10 us,
    # ~7 + 17.5 + 14 = ~39 at 25: ~18-22 % off the step
    torch, nn, F = k.torch, k.nn, k.F
    img, batch, per_image, classes, div = (64, 2, 3, 3, 8) if k.quick else (640, 32, 7, 80, 1)
    na, nl, anchor_t, g = 3, 3, 4.0, 0.5
    strides = (8, 16, 32)
    anchor_px = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))

    def ch(c: int) -> int:
        return max(8, c // div)

    class Conv(nn.Module):  # conv, BatchNorm, SiLU
        def __init__(self, ci: int, co: int, ks: int = 1, s: int = 1, p: int | None = None):
            super().__init__()
            self.conv = nn.Conv2d(ci, co, ks, s, ks // 2 if p is None else p, bias=False)
            self.bn = nn.BatchNorm2d(co, eps=1e-3, momentum=0.03)

        def forward(self, x):
            return F.silu(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c: int, shortcut: bool) -> None:
            super().__init__()
            self.cv1, self.cv2, self.add = Conv(c, c, 1), Conv(c, c, 3), shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C3(nn.Module):  # CSP bottleneck with 3 convs
        def __init__(self, ci: int, co: int, n: int, shortcut: bool = True) -> None:
            super().__init__()
            c = co // 2
            self.cv1, self.cv2, self.cv3 = Conv(ci, c), Conv(ci, c), Conv(2 * c, co)
            self.m = nn.Sequential(*[Bottleneck(c, shortcut) for _ in range(n)])

        def forward(self, x):
            return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], 1))

    class SPPF(nn.Module):
        def __init__(self, ci: int, co: int) -> None:
            super().__init__()
            self.cv1, self.cv2 = Conv(ci, ci // 2), Conv(ci * 2, co)
            self.pool = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            x = self.cv1(x)
            y1 = self.pool(x)
            y2 = self.pool(y1)
            return self.cv2(torch.cat([x, y1, y2, self.pool(y2)], 1))

    class YOLOv5s(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c32, c64, c128, c256, c512 = (ch(c) for c in (32, 64, 128, 256, 512))
            self.stem = nn.Sequential(
                Conv(3, c32, 6, 2, 2), Conv(c32, c64, 3, 2), C3(c64, c64, 1),
                Conv(c64, c128, 3, 2), C3(c128, c128, 2),
            )  # fmt: skip  # P3/8
            self.p4 = nn.Sequential(Conv(c128, c256, 3, 2), C3(c256, c256, 3))
            self.p5 = nn.Sequential(Conv(c256, c512, 3, 2), C3(c512, c512, 1), SPPF(c512, c512))
            self.lat5, self.c3_4 = Conv(c512, c256), C3(c512, c256, 1, False)
            self.lat4, self.c3_3 = Conv(c256, c128), C3(c256, c128, 1, False)
            self.down3, self.c3_n4 = Conv(c128, c128, 3, 2), C3(c256, c256, 1, False)
            self.down4, self.c3_n5 = Conv(c256, c256, 3, 2), C3(c512, c512, 1, False)
            self.detect = nn.ModuleList(
                nn.Conv2d(c, na * (5 + classes), 1) for c in (c128, c256, c512)
            )
            for conv, s in zip(self.detect, strides, strict=True):  # YOLOv5's prior biases
                b = conv.bias.view(na, -1)
                b.data[:, 4] += math.log(8 / (640 / s) ** 2)
                b.data[:, 5:] += math.log(0.6 / (classes - 0.99))

        def forward(self, x):
            p3 = self.stem(x)
            p4 = self.p4(p3)
            p5 = self.p5(p4)
            t5 = self.lat5(p5)
            t4 = self.lat4(self.c3_4(torch.cat([F.interpolate(t5, scale_factor=2.0), p4], 1)))
            o3 = self.c3_3(torch.cat([F.interpolate(t4, scale_factor=2.0), p3], 1))
            o4 = self.c3_n4(torch.cat([self.down3(o3), t4], 1))
            o5 = self.c3_n5(torch.cat([self.down4(o4), t5], 1))
            outs = []
            for conv, o in zip(self.detect, (o3, o4, o5), strict=True):
                b, _, ny, nx = o.shape
                y = conv(o).view(b, na, 5 + classes, ny, nx).permute(0, 1, 3, 4, 2)
                outs.append(y.contiguous())
            return outs

    model = YOLOv5s().to(device)
    decay, no_decay, biases = [], [], []  # YOLOv5's three parameter groups
    for m in model.modules():
        if hasattr(m, "bias") and isinstance(m.bias, nn.Parameter):
            biases.append(m.bias)
        if isinstance(m, nn.BatchNorm2d):
            no_decay.append(m.weight)
        elif hasattr(m, "weight") and isinstance(m.weight, nn.Parameter):
            decay.append(m.weight)
    opt = torch.optim.SGD(
        [{"params": no_decay}, {"params": decay, "weight_decay": 5e-4}, {"params": biases}],
        lr=0.01, momentum=0.937, nesterov=True,
    )  # fmt: skip

    gen = torch.Generator().manual_seed(167)
    x = torch.rand(batch, 3, img, img, generator=gen).to(device)
    nt = batch * per_image  # targets: (image, class, x, y, w, h), normalised
    wh = torch.exp(torch.empty(nt, 2).uniform_(math.log(0.02), math.log(0.6), generator=gen))
    xy = wh / 2 + torch.rand(nt, 2, generator=gen) * (1 - wh)
    targets = torch.cat(
        [torch.arange(batch).repeat_interleave(per_image)[:, None].float(),
         torch.randint(0, classes, (nt, 1), generator=gen).float(), xy, wh], 1,
    ).to(device)  # fmt: skip
    # made once on the device (YOLOv5 makes these each step from host values, each a copy)
    ai = torch.arange(na, device=device).float().view(na, 1).repeat(1, nt)
    targets7 = torch.cat([targets.repeat(na, 1, 1), ai[..., None]], 2)  # (na, nt, 7)
    off = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]], device=device).float() * g
    anchors = [
        torch.tensor(a, device=device).float().view(na, 2) / s
        for a, s in zip(anchor_px, strides, strict=True)
    ]
    grids = [img // s for s in strides]
    gains = [torch.tensor([1, 1, n, n, n, n, 1], device=device).float() for n in grids]
    balance = (4.0, 1.0, 0.4)
    hyp_box, hyp_obj, hyp_cls = 0.05, 1.0 * (img / 640) ** 2, 0.5 * classes / 80
    bce = nn.BCEWithLogitsLoss()

    def ciou(b1, b2, eps=1e-7):  # YOLOv5's complete IoU of (x, y, w, h) boxes
        (x1, y1, w1, h1), (x2, y2, w2, h2) = b1.chunk(4, -1), b2.chunk(4, -1)
        b1x1, b1x2, b1y1, b1y2 = x1 - w1 / 2, x1 + w1 / 2, y1 - h1 / 2, y1 + h1 / 2
        b2x1, b2x2, b2y1, b2y2 = x2 - w2 / 2, x2 + w2 / 2, y2 - h2 / 2, y2 + h2 / 2
        inter = (torch.min(b1x2, b2x2) - torch.max(b1x1, b2x1)).clamp(0) * (
            torch.min(b1y2, b2y2) - torch.max(b1y1, b2y1)
        ).clamp(0)
        union = w1 * h1 + w2 * h2 - inter + eps
        iou = inter / union
        cw = torch.max(b1x2, b2x2) - torch.min(b1x1, b2x1)
        chh = torch.max(b1y2, b2y2) - torch.min(b1y1, b2y1)
        c2 = cw**2 + chh**2 + eps
        rho2 = ((b2x1 + b2x2 - b1x1 - b1x2) ** 2 + (b2y1 + b2y2 - b1y1 - b1y2) ** 2) / 4
        v = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
        with torch.no_grad():
            alpha = v / (v - iou + (1 + eps))
        return (iou - (rho2 / c2 + v * alpha)).squeeze(-1)

    def candidates(i: int):
        """Level i's target-anchor-cell candidates: (t (m, 7), offsets (m, 2), weight (m,) or
        None). Planted: YOLOv5's build_targets, the candidates picked by boolean masks (3
        syncs); fixed: every candidate kept, the picks as a 0/1 weight, in the same order."""
        t = targets7 * gains[i]
        r = t[..., 4:6] / anchors[i][:, None]
        ok = torch.max(r, 1 / r).max(2)[0] < anchor_t  # (na, nt)
        if not fixed:
            t = t[ok]  # sync
            gxy = t[:, 2:4]
            gxi = gains[i][2:4] - gxy
            j, kk = ((gxy % 1 < g) & (gxy > 1)).T
            ll, m = ((gxi % 1 < g) & (gxi > 1)).T
            j = torch.stack((torch.ones_like(j), j, kk, ll, m))
            t = t.repeat((5, 1, 1))[j]  # sync
            offsets = (torch.zeros_like(gxy)[None] + off[:, None])[j]  # sync
            return t, offsets, None
        gxy = t[..., 2:4]
        gxi = gains[i][2:4] - gxy
        j, kk = ((gxy % 1 < g) & (gxy > 1)).unbind(-1)
        ll, m = ((gxi % 1 < g) & (gxi > 1)).unbind(-1)
        w = torch.stack((torch.ones_like(j), j, kk, ll, m)) & ok  # (5, na, nt)
        offsets = off[:, None, None].expand(5, na, nt, 2).reshape(-1, 2)
        return t.repeat((5, 1, 1, 1)).view(-1, 7), offsets, w.flatten().float()

    def yolo_loss(preds):
        lbox = torch.zeros((), device=device)
        lobj, lcls = lbox.clone(), lbox.clone()
        for i, pi in enumerate(preds):
            t, offsets, w = candidates(i)
            bc, gxy, gwh, a = t.split((2, 2, 2, 1), 1)
            a, (b, c) = a.long().view(-1), bc.long().T
            gij = (gxy - offsets).long()
            gi, gj = gij.T
            tbox = torch.cat([gxy - gij, gwh], 1)
            gj, gi = gj.clamp(0, grids[i] - 1), gi.clamp(0, grids[i] - 1)
            ps = pi[b, a, gj, gi]  # (m, 5 + classes)
            pxy = ps[:, :2].sigmoid() * 2 - 0.5
            pwh = (ps[:, 2:4].sigmoid() * 2) ** 2 * anchors[i][a]
            iou = ciou(torch.cat([pxy, pwh], 1), tbox)
            score = iou.detach().clamp(0)
            tcls = torch.zeros_like(ps[:, 5:]).scatter_(1, c[:, None], 1.0)
            if w is None:  # planted: the picked candidates only
                if len(t):
                    lbox = lbox + (1.0 - iou).mean()
                    lcls = lcls + bce(ps[:, 5:], tcls)
            else:  # fixed: every candidate, weighted, over the count kept on the GPU
                n = w.sum().clamp(min=1)
                lbox = lbox + ((1.0 - iou) * w).sum() / n
                cls_l = F.binary_cross_entropy_with_logits(ps[:, 5:], tcls, reduction="none")
                lcls = lcls + (cls_l * w[:, None]).sum() / (n * classes)
                score = score * w
            # objectness target: the IoU, the largest where candidates share a cell (YOLOv5's
            # sort_obj_iou), as a max-scatter into zeros
            tobj = torch.zeros(pi.shape[:4], device=device)
            cell = ((b * na + a) * grids[i] + gj) * grids[i] + gi
            tobj = tobj.view(-1).scatter_reduce(0, cell, score, "amax").view(pi.shape[:4])
            lobj = lobj + bce(pi[..., 4], tobj) * balance[i]
        items = torch.stack([lbox * hyp_box, lobj * hyp_obj, lcls * hyp_cls])
        return items.sum() * batch, items.detach()

    mloss = torch.zeros(3, device=device)
    state = {"i": 0}
    logged: list[list[float]] = []

    def step():
        with k.ac:
            preds = model(x)
        loss, items = yolo_loss([p.float() for p in preds])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        i = state["i"]
        mloss.mul_(i / (i + 1)).add_(items / (i + 1))  # the running mean of the three losses
        state["i"] = i + 1
        if not fixed:  # planted: the progress line formats the three running losses (3 syncs)
            logged.append([v.item() for v in mloss])

    k.meta["syncs_per_step"] = 0 if fixed else 3 * nl + 3
    k.meta["targets_per_step"] = nt
    return step, batch, model


def _deeplab(k: Kit, fixed: bool, device: str, rank: int):
    # H100: 3.16 TFLOP a step at batch 8 (FlopCounter; 66 GMAC an image forward, 88 % of it in
    # the 13 dilated 3x3 convs at 56x56: layer3 6.5, layer4 41, the ASPP's 11) of fp32 convs
    # with cuDNN TF32, ~150-250 TFLOP/s under the heuristics' picks: ~13-21 ms; 230 M conv
    # outputs through fp32 BatchNorm and ReLU (~40 B each fwd+bwd), the 21-class logits at
    # 448x448 and the cross-entropy: ~10 GB, ~4 ms; ~270 kernels (~3-7 ms of host):
    # GPU-bound, ~17-25 ms. cudnn.benchmark times every algorithm for each of the convolutions'
    # shapes (forward, data and weight gradients); dilation is where heuristics and measurement
    # part most (v37's ASPP 27.8 %, v147's ESPNet 13.4 %): ~15-30 % off the dilated convs,
    # ~10-20 % off the step
    torch, nn, F = k.torch, k.nn, k.F
    torch.backends.cudnn.benchmark = fixed
    img, batch, div, classes = (64, 2, 8, 5) if k.quick else (448, 8, 1, 21)
    c64, c128, c256, c512, aspp = (max(8, c // div) for c in (64, 128, 256, 512, 256))

    def cbr(ci: int, co: int, ks: int, s: int = 1, d: int = 1) -> list:
        pad = d * (ks // 2)
        return [nn.Conv2d(ci, co, ks, s, pad, d, bias=False), nn.BatchNorm2d(co), nn.ReLU()]

    class Block(nn.Module):  # a basic residual block, its 3x3 convs dilated d
        def __init__(self, ci: int, co: int, s: int, d: int) -> None:
            super().__init__()
            self.body = nn.Sequential(*cbr(ci, co, 3, s, d), *cbr(co, co, 3, 1, d)[:2])
            self.short = None
            if s > 1 or ci != co:
                self.short = nn.Sequential(nn.Conv2d(ci, co, 1, s, bias=False), nn.BatchNorm2d(co))

        def forward(self, x):
            return F.relu(self.body(x) + (x if self.short is None else self.short(x)))

    class ASPP(nn.Module):  # a 1x1 conv, 3x3 convs dilated 12/24/36, image pooling
        def __init__(self, ci: int) -> None:
            super().__init__()
            self.branches = nn.ModuleList(
                [nn.Sequential(*cbr(ci, aspp, 1))]
                + [nn.Sequential(*cbr(ci, aspp, 3, 1, r)) for r in (12, 24, 36)]
            )
            self.pool = nn.Sequential(*cbr(ci, aspp, 1))
            self.project = nn.Sequential(*cbr(5 * aspp, aspp, 1), nn.Dropout(0.5))

        def forward(self, x):
            outs = [b(x) for b in self.branches]
            pooled = self.pool(F.adaptive_avg_pool2d(x, 1))
            outs.append(F.interpolate(pooled, size=x.shape[2:], mode="bilinear"))
            return self.project(torch.cat(outs, 1))

    class DeepLabV3(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(*cbr(3, c64, 7, 2), nn.MaxPool2d(3, 2, 1))
            self.layer1 = nn.Sequential(Block(c64, c64, 1, 1), Block(c64, c64, 1, 1))
            self.layer2 = nn.Sequential(Block(c64, c128, 2, 1), Block(c128, c128, 1, 1))
            self.layer3 = nn.Sequential(Block(c128, c256, 1, 2), Block(c256, c256, 1, 2))
            self.layer4 = nn.Sequential(*[Block(c256 if i == 0 else c512, c512, 1, 4 * g)
                                          for i, g in enumerate((1, 2, 4))])  # fmt: skip
            self.aspp = ASPP(c512)
            self.head = nn.Sequential(*cbr(aspp, aspp, 3), nn.Conv2d(aspp, classes, 1))

        def forward(self, x):
            f = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
            out = self.head(self.aspp(f))
            return F.interpolate(out, size=x.shape[2:], mode="bilinear", align_corners=False)

    model = DeepLabV3().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(168)
    x = torch.randn(batch, 3, img, img, generator=gen).to(device)
    coarse = torch.randint(0, classes, (batch, 1, img // 32 + 1, img // 32 + 1), generator=gen)
    labels = F.interpolate(coarse.float(), scale_factor=32, mode="nearest")[:, 0, :img, :img]
    labels = labels.long()
    labels[:, 14::32] = 255  # a band of ignored pixels where regions meet, as annotation borders
    labels = labels.to(device)

    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["precision"] = "fp32, cuDNN TF32 on, matmul TF32 off"
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    k.meta["conv2d_layers"] = len(convs)
    k.meta["dilated_convs"] = sum(m.dilation[0] > 1 and m.kernel_size[0] > 1 for m in convs)

    def loss_fn():
        return F.cross_entropy(model(x), labels, ignore_index=255)

    return k.train(opt, loss_fn), batch, model


def _hyena(k: Kit, fixed: bool, device: str, rank: int):
    # ~115 kernels a block forward and backward (LayerNorms, the projections, the depthwise
    # conv, the filter's MLP and decay, three FFTs and the gating; the MLP) and ~50 more for the
    # embedding, LM head, loss and the fused AdamW: ~750 launches a step with the bf16 casts,
    # ~7.5 ms of host at 10 us a launch, ~19 at 25. The GPU at batch 2 (2048 tokens, d 256:
    # ~1-4 MB a tensor): ~0.13 TFLOP and every kernel a few microseconds, ~3-4 ms: the step is
    # the host's. At batch 16 (16384 tokens): 1.02 TFLOP of bf16 matmuls (FlopCounter), ~3
    # ms, and ~18 GB of elementwise, FFT and LayerNorm traffic (8-34 MB a tensor), ~8-10 ms:
    # ~11-13 ms of GPU, about the host's: ~13-19 ms for 8 x the samples, ~78-88 % off the time
    # per sample
    torch, nn, F = k.torch, k.nn, k.F
    vocab, d, layers, seq, batch, filt = (
        (64, 16, 2, 32, 2, 8) if k.quick else (8192, 256, 6, 1024, 2, 64)
    )
    batch *= 8 if fixed else 1

    class Sin(nn.Module):  # sin(freq * x), a learned frequency per channel
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.freq = nn.Parameter(torch.ones(1, dim))

        def forward(self, x):
            return torch.sin(self.freq * x)

    class HyenaFilter(nn.Module):  # the implicit long filter: positions -> MLP -> decay
        def __init__(self) -> None:
            super().__init__()
            t = torch.linspace(0, 1, seq)[None, :, None]  # (1, L, 1)
            w = 2 * math.pi * torch.linspace(0, seq - 1, seq)[None, :, None] / seq
            z = torch.exp(-1j * 1e-4 * w)  # one band
            self.register_buffer("z", torch.cat([t, z.real, z.imag], -1))  # (1, L, 3)
            self.register_buffer("t", t)
            self.mlp = nn.Sequential(
                nn.Linear(3, filt), Sin(filt), nn.Linear(filt, filt), Sin(filt),
                nn.Linear(filt, filt), Sin(filt), nn.Linear(filt, d, bias=False),
            )  # fmt: skip
            fast, slow = math.log(1e-2) / 0.3, math.log(1e-2) / 1.5
            self.register_buffer("deltas", torch.linspace(slow, fast, d)[None, None])
            self.bias = nn.Parameter(torch.randn(d))

        def forward(self):  # (d, L): the filter, exponentially modulated
            h = self.mlp(self.z) * torch.exp(-self.t * self.deltas.abs())
            return h[0].transpose(0, 1)

    def fftconv(u, kern, bias):  # causal convolution of (b, d, L) by (d, L) through the FFT
        n = 2 * u.shape[-1]
        k_f = torch.fft.rfft(kern.float(), n=n) / n
        u_f = torch.fft.rfft(u.float(), n=n)
        y = torch.fft.irfft(u_f * k_f, n=n, norm="forward")[..., : u.shape[-1]]
        return (y + u * bias[:, None]).to(u.dtype)

    class HyenaOperator(nn.Module):  # order 2: two gates, one value
        def __init__(self) -> None:
            super().__init__()
            self.in_proj, self.out_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.short = nn.Conv1d(3 * d, 3 * d, 3, padding=2, groups=3 * d)
            self.filter = HyenaFilter()

        def forward(self, u):  # (b, L, d)
            length = u.shape[1]
            uc = self.short(self.in_proj(u).transpose(1, 2))[..., :length]  # causal
            x0, x1, v = uc.split(d, 1)
            v = fftconv(v * x1, self.filter(), self.filter.bias)
            return self.out_proj((v * x0).transpose(1, 2))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.mixer = HyenaOperator()
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            x = x + self.mixer(self.n1(x))
            return x + self.mlp(self.n2(x))

    class HyenaLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.norm = nn.LayerNorm(d)

        def forward(self, ids):
            return F.linear(self.norm(self.blocks(self.emb(ids))), self.emb.weight)

    model = HyenaLM().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(169)
    ids = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)

    def loss_fn():
        with k.ac:
            logits = model(ids[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, vocab), ids[:, 1:].reshape(-1))

    k.meta["batch_multiple"] = 8
    k.meta["tokens_per_step"] = batch * seq
    return k.train(opt, loss_fn), batch, model


BUILDERS = {
    "v165": _informer,
    "v166": _pointpillars,
    "v167": _yolo,
    "v168": _deeplab,
    "v169": _hyena,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
