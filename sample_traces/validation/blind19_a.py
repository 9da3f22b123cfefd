"""The nineteenth blind part's cases v230-v235 (merged by record_blind19.py): six one-GPU pairs on
model families no earlier case used, chosen to judge on unseen runs the three estimates changed
on seen pairs since the eighteenth part's judgement: ``mixed_precision``'s top where the code
names channels_last (the model in channels_last in the fix), ``pin_memory``'s top (the host's
wait variation) and ``cuda_graphs``' top on a step not compiled yet (Inductor's kernels).

CUDA graphs (``reduce-overhead``) on an eager GraphSAGE-style node classifier over sampled
neighbourhoods (v230) and on an eager NCF-style recommender (v231); bf16 autocast with the model
in channels_last, as gpuscope's code for a convolution net says, on a SqueezeNet-style classifier
in fp32 with cuDNN's TF32 (v232); ``DataLoader(pin_memory=True)`` for a QuartzNet-style acoustic
model fed 37 MB of log-mel features a step (v233); and two chosen to gain nothing:
``pin_memory=True`` for a GPU-bound Transformer-XL-style language model fed 131 KB of token ids a
step (v234), bf16 with the model in channels_last on a host-bound FractalNet-style CIFAR network
(v235).

Each builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model); planted and fixed
build the same model from the same seed and differ only in the planted thing. Sizes come from
FLOP, byte and launch counts over one step, worked by hand (nothing here ran on a GPU before the
part was fixed); each builder's comment gives its estimate of one step on an H200 (bf16 matmuls
at ~400-600 TFLOP/s, TF32 convolutions at ~100-200, fp32 matmuls at ~50, memory at ~3.5 TB/s,
~10-25 us of host an eager launch); the one-GPU cases recorded before ran up to ~1.5-2 x their
estimates.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import FP32_TF32, Kit, compile_in_place, next_batches  # noqa: E402

BF16_CL = "bf16 autocast, the model in channels_last (model.to(memory_format=torch.channels_last))"
"""The fix of the two convolution cases, as gpuscope's ``mixed_precision`` code gives it for a 2-D
convolution net (``mixed_precision.CHANNELS_LAST_HINT``)."""

CASES: dict[str, dict] = {
    "v230": {
        "name": "cuda_graphs",
        "model": "GraphSAGE-style node classifier (a graph of 20,000 nodes with 128 fp32 "
        "features each; per step 512 target nodes with 15 sampled neighbours each and 10 of "
        "each of those: 2 mean-aggregator layers of 256, each the neighbours' mean concatenated "
        "with the node's own vector, a Linear, ReLU and L2 normalisation; a Linear to 47 "
        f"classes) on a pool of 8 pre-sampled minibatches, {FP32_TF32}, AdamW(fused=True) "
        "eager, no torch.compile planted: ~100 small kernels a step",
        "planted": "eager: each of the step's small kernels launched from Python",
        "fix": "torch.compile(model, mode='reduce-overhead') (as model.compile(mode="
        "'reduce-overhead')): the forward and the backward replayed as CUDA graphs",
        "expected_fix": "cuda_graphs",
        "compiled": True,
    },
    "v231": {
        "name": "cuda_graphs",
        "model": "NCF-style recommender (neural collaborative filtering: a GMF branch of 64-D "
        "user and item embeddings multiplied elementwise and an MLP branch of its own 64-D "
        "embeddings through 128-256-128-64 with ReLU, concatenated into one logit; 50,000 "
        "users, 20,000 items; binary cross-entropy on 1 positive and 3 negatives per user) on "
        f"batches of 2,048 pairs, {FP32_TF32}, AdamW(fused=True) eager, no torch.compile "
        "planted: ~70 small kernels a step",
        "planted": "eager: each of the step's small kernels launched from Python",
        "fix": "torch.compile(model, mode='reduce-overhead') (as model.compile(mode="
        "'reduce-overhead')): the forward and the backward replayed as CUDA graphs",
        "expected_fix": "cuda_graphs",
        "compiled": True,
    },
    "v232": {
        "name": "mixed_precision",
        "model": "SqueezeNet-style classifier (SqueezeNet 1.1 layout: a 3x3 stride-2 stem to "
        "64 ch, 8 fire modules (a 1x1 squeeze, then 1x1 and 3x3 expands concatenated, ReLU) of "
        "128-512 ch between 3 max pools, a 1x1 convolution to 1,000 classes and a global mean; "
        f"no BatchNorm) on 224x224 images, batch 256, {FP32_TF32}, NCHW, AdamW(fused=True)",
        "planted": "fp32, cuDNN TF32 on, NCHW",
        "fix": BF16_CL,
        "expected_fix": "mixed_precision",
    },
    "v233": {
        "name": "pin_memory",
        "model": "QuartzNet-style acoustic model (a stride-2 width-33 time-channel separable "
        "convolution to 256 ch; 5 blocks of 3 repeats of a depthwise Conv1d of width 33-75, a "
        "pointwise Conv1d, BatchNorm and ReLU, 256-512 ch, each block with a pointwise residual; "
        "a dilated width-87 separable convolution, 1x1 convolutions to 1,024 and to 48 phone "
        "classes; a framewise phone cross-entropy) on 24 s of 80-bin log-mel features (2,400 "
        "frames, fp32), batch 48, bf16 autocast, AdamW(fused=True); the features sliced from a "
        "pre-made pool in the Dataset, loaded by DataLoader(num_workers=4, "
        "persistent_workers=True) in both variants",
        "planted": "36.9 MB per step (fp32 log-mel features) in pageable host memory "
        "(DataLoader(pin_memory=False)), copied with non_blocking=True (a synchronous staged "
        "copy)",
        "fix": "DataLoader(pin_memory=True): each batch pinned (page-locked) by the loader's "
        "pin-memory thread, copied with non_blocking=True",
        "expected_fix": "pin_memory",
    },
    "v234": {
        "name": "null_pin_memory",
        "model": "Transformer-XL-style language model (12 layers of 1,024, 16 heads, each layer "
        "attending causally over its own cached hidden states of the previous 512-token "
        "segment, detached, and the current segment; a 4,096 GELU MLP, pre-LayerNorm; a 32,000 "
        "vocabulary, untied) on segments of 512 tokens, batch 16, bf16 autocast, "
        "AdamW(fused=True); the token ids (int64) sliced from a pre-made stream in the Dataset, "
        "loaded by DataLoader(num_workers=2, persistent_workers=True) in both variants: GPU-bound",
        "planted": "131 KB per step (int64 token ids and targets) in pageable host memory "
        "(DataLoader(pin_memory=False)), copied with non_blocking=True",
        "fix": "DataLoader(pin_memory=True) (gains ~0: 131 KB a step, ~20-40 us of copy beside "
        "a GPU-bound step of ~20-30 ms)",
        "expected_fix": "pin_memory",
        "null": True,
    },
    "v235": {
        "name": "null_mixed_precision",
        "model": "FractalNet-style CIFAR classifier (5 fractal blocks of 3 columns, 64-128-256-"
        "512-512 ch, each column a chain of 1, 2 or 4 3x3 convolutions with BatchNorm and ReLU, "
        "the columns joined by their mean, a max pool after each block; a Linear to 100 "
        f"classes) on 32x32 images, batch 32, {FP32_TF32}, NCHW, AdamW(fused=True): host-bound",
        "planted": "fp32, cuDNN TF32 on, NCHW",
        "fix": f"{BF16_CL} (gains ~0: a host-bound step of ~400 launches whose kernels the GPU "
        "finishes before the next arrive)",
        "expected_fix": "mixed_precision",
        "null": True,
    },
}


# ---------------------------------------------------------------- v230: GraphSAGE, CUDA graphs


def _replayed_step(k: Kit, model: Any, fixed: bool, batches: list, loss: Any) -> Any:
    """The step of v230's and v231's eager models: a fused AdamW over ``model``, the model compiled
    in place with ``mode="reduce-overhead"`` in the fixed variant only (the fix), and ``loss`` of
    each of ``batches`` (tuples of tensors on the device) in turn; the compile mode and the
    precision in ``k.meta``."""
    opt = k.adamw(model, fused=k.cuda)
    mode = "reduce-overhead"
    if fixed:
        k.meta["compile_how"] = compile_in_place(model, mode=mode)
    state = {"n": 0}

    def loss_fn():
        batch = batches[state["n"] % len(batches)]
        state["n"] += 1
        return loss(*batch)

    k.meta["compiled"] = fixed
    k.meta["compile_mode"] = mode if fixed else "eager"
    k.meta["precision"] = FP32_TF32
    return k.train(opt, loss_fn)


def _graphsage(k: Kit, fixed: bool, device: str, rank: int):
    # H200, fp32 (matmul TF32 off): per step the gather of 512 x 15 x 10 = 76,800 2-hop feature
    # rows of 128 (39 MB) and 7,680 1-hop rows, the 1-hop layer's Linear (7,680 + 512 rows, 256
    # -> 256: 2.1 GFLOP), the 2-hop layer's (512 rows, 512 -> 256: 0.13), the classifier; x 3
    # with the backward: ~7 GFLOP at ~40-50 TFLOP/s, ~0.15 ms, the gathers, means and their
    # scatters back ~0.1 ms: ~0.3 ms of GPU. ~35 kernels forward (gathers, views' means, cats,
    # Linears, ReLU, the norm, clamp and divide, the loss), ~60 backward, the fused AdamW: ~100
    # launches at ~10-25 us, ~1.5-2.5 ms of host: launch-bound. reduce-overhead replays the
    # forward and the backward as two graphs (~1-1.5 ms a step with the replay's own host time)
    torch, nn, F = k.torch, k.nn, k.F
    nodes, feat, hid, classes, batch, fan1, fan2, pool = (
        (200, 8, 16, 5, 8, 3, 2, 2) if k.quick else (20_000, 128, 256, 47, 512, 15, 10, 8)
    )
    gen = torch.Generator().manual_seed(230)
    features = torch.randn(nodes, feat, generator=gen).to(device)
    labels = torch.randint(0, classes, (nodes,), generator=gen).to(device)
    minibatches = []
    for _ in range(pool):  # targets, their sampled 1-hop neighbours, and those nodes' own
        targets = torch.randint(0, nodes, (batch,), generator=gen)
        hop1 = torch.randint(0, nodes, (batch * fan1,), generator=gen)
        hop2 = torch.randint(0, nodes, (batch * fan1 * fan2,), generator=gen)
        minibatches.append(tuple(t.to(device) for t in (targets, hop1, hop2)))

    class SAGE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = nn.Linear(2 * feat, hid)
            self.l2 = nn.Linear(2 * hid, hid)
            self.out = nn.Linear(hid, classes)

        def layer(self, lin, own, neigh, fan: int):
            agg = neigh.view(own.shape[0], fan, -1).mean(1)
            return F.normalize(F.relu(lin(torch.cat([own, agg], 1))), dim=1)

        def forward(self, targets, hop1, hop2):
            h1_targets = self.layer(self.l1, features[targets], features[hop1], fan1)
            h1_hop1 = self.layer(self.l1, features[hop1], features[hop2], fan2)
            h2 = self.layer(self.l2, h1_targets, h1_hop1, fan1)
            return self.out(h2)

    model = SAGE().to(device)
    k.meta["fanouts"] = [fan1, fan2]

    def loss(targets, hop1, hop2):
        return F.cross_entropy(model(targets, hop1, hop2), labels[targets])

    return _replayed_step(k, model, fixed, minibatches, loss), batch, model


# ---------------------------------------------------------------- v231: NCF, CUDA graphs


def _ncf(k: Kit, fixed: bool, device: str, rank: int):
    # H200, fp32: 2,048 pairs, four embedding lookups of 64 (0.5 MB each), the MLP 128 -> 256 ->
    # 128 -> 64 (2,048 rows: ~0.3 GFLOP forward, ~1 with the backward, ~20-30 us), the GMF
    # product, the concat and the logit; the embeddings' dense gradients (50,000 x 64 and 20,000
    # x 64, twice: 36 MB written and read by the fused AdamW over 9 M parameters, ~0.1 ms): ~0.2-
    # 0.3 ms of GPU against ~25 kernels forward, ~40 backward and the optimizer: ~70 launches,
    # ~1-1.5 ms of host: launch-bound. reduce-overhead replays forward and backward as graphs
    torch, nn, F = k.torch, k.nn, k.F
    users, items, dim, batch, pool = (
        (50, 40, 8, 16, 2) if k.quick else (50_000, 20_000, 64, 2048, 8)
    )
    gen = torch.Generator().manual_seed(231)
    pairs = []
    for _ in range(pool):  # each user in a batch: 1 positive item and 3 sampled negatives
        u = torch.randint(0, users, (batch // 4,), generator=gen).repeat_interleave(4)
        i = torch.randint(0, items, (batch,), generator=gen)
        y = torch.tensor([1.0, 0.0, 0.0, 0.0]).repeat(batch // 4)
        pairs.append((u.to(device), i.to(device), y.to(device)))

    class NCF(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gmf_u, self.gmf_i = nn.Embedding(users, dim), nn.Embedding(items, dim)
            self.mlp_u, self.mlp_i = nn.Embedding(users, dim), nn.Embedding(items, dim)
            self.mlp = nn.Sequential(
                nn.Linear(2 * dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, 2 * dim), nn.ReLU(),
                nn.Linear(2 * dim, dim), nn.ReLU(),
            )  # fmt: skip
            self.logit = nn.Linear(2 * dim, 1)

        def forward(self, u, i):
            gmf = self.gmf_u(u) * self.gmf_i(i)
            mlp = self.mlp(torch.cat([self.mlp_u(u), self.mlp_i(i)], 1))
            return self.logit(torch.cat([gmf, mlp], 1)).squeeze(1)

    model = NCF().to(device)

    def loss(u, i, y):
        return F.binary_cross_entropy_with_logits(model(u, i), y)

    return _replayed_step(k, model, fixed, pairs, loss), batch, model


# ---------------------------------------------------------------- v232: SqueezeNet, bf16 + NHWC


def _classifier_step(
    k: Kit, model: Any, fixed: bool, device: str, seed: int, sizes: tuple[int, int, int]
) -> Any:
    """The step of v232's and v235's image classifiers, ``model`` on ``device`` already: its fixed
    variant in channels_last under bf16 autocast (the fix gpuscope's code gives a convolution net),
    a fused AdamW, one random batch of ``sizes`` (batch, side, classes) drawn from ``seed``, the
    cross-entropy; ``(step_fn, batch, model)``, the precision and memory format in ``k.meta``."""
    torch, F = k.torch, k.F
    batch, side, classes = sizes
    if fixed:
        model = model.to(memory_format=torch.channels_last)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, side, side, generator=gen).to(device)
    y = torch.randint(0, classes, (batch,), generator=gen).to(device)

    def loss_fn():
        if fixed:
            with k.ac:
                return F.cross_entropy(model(x).float(), y)
        return F.cross_entropy(model(x), y)

    k.meta["precision"] = f"bf16 autocast, {FP32_TF32}" if fixed else FP32_TF32
    k.meta["memory_format"] = "channels_last" if fixed else "contiguous"
    return k.train(opt, loss_fn), batch, model


def _squeezenet(k: Kit, fixed: bool, device: str, rank: int):
    # H200, cuDNN TF32, NCHW: SqueezeNet 1.1 is ~0.35 GMAC an image at 224 (the stem's 0.02 at
    # 111 x 111, the fire modules' at 55, 27 and 13), 0.7 GFLOP, x 256 x 3 = 0.54 TFLOP a step at
    # ~60-120 TFLOP/s under cuDNN's NCHW picks, ~5-9 ms, with cuDNN's layout transforms around
    # its tensor-core kernels; ReLU, the concatenations and the pools over ~1.5 GB of fp32
    # activations forward, ~4-5 GB with the backward, ~1.5 ms; ~80 kernels forward, ~200 a step
    # (~3 ms of host): GPU-bound, ~7-11 ms. bf16 in channels_last: the convolutions at twice the
    # rate and no transforms, the activations' bytes halved: ~3-5 ms, near the host's ~3
    torch, nn, F = k.torch, k.nn, k.F
    side, batch, classes = (32, 2, 10) if k.quick else (224, 256, 1000)

    class Fire(nn.Module):
        def __init__(self, ci: int, s: int, e: int) -> None:
            super().__init__()
            self.squeeze = nn.Conv2d(ci, s, 1)
            self.e1, self.e3 = nn.Conv2d(s, e, 1), nn.Conv2d(s, e, 3, padding=1)

        def forward(self, x):
            x = F.relu(self.squeeze(x))
            return torch.cat([F.relu(self.e1(x)), F.relu(self.e3(x))], 1)

    pool = nn.MaxPool2d(3, 2, ceil_mode=True)
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, 2), nn.ReLU(), pool,
        Fire(64, 16, 64), Fire(128, 16, 64), pool,
        Fire(128, 32, 128), Fire(256, 32, 128), pool,
        Fire(256, 48, 192), Fire(384, 48, 192), Fire(384, 64, 256), Fire(512, 64, 256),
        nn.Conv2d(512, classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ).to(device)  # fmt: skip
    return _classifier_step(k, model, fixed, device, 232, (batch, side, classes))


# ---------------------------------------------------------------- v233: QuartzNet, pin_memory


class _Slices:
    """A Dataset of ``n`` samples sliced from a pre-made pool: sample ``i`` is the tuple of
    ``arrays[j][i % len]`` as tensors (numpy views: the collation copies them into the batch)."""

    def __init__(self, n: int, *arrays: Any) -> None:
        self.n, self.arrays = n, arrays

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        import torch

        return tuple(torch.from_numpy(a[i % len(a)]) for a in self.arrays)


def _loaded_step(
    k: Kit,
    model: Any,
    fixed: bool,
    device: str,
    arrays: tuple[Any, Any],
    sizes: tuple[int, int],
    loss: Any,
) -> Any:
    """The step of v233's and v234's models: a fused AdamW; a ``DataLoader`` of ``sizes``
    (batch, workers) persistent workers over 1,000 passes of the pool ``arrays`` (inputs, targets:
    :class:`_Slices`), pinning its batches in the fixed variant only (the fix); each batch copied
    with ``non_blocking=True``, the forward under bf16 autocast, ``loss(logits, targets)``. The
    workers and the pinning in ``k.meta``."""
    from torch.utils.data import DataLoader

    batch, workers = sizes
    opt = k.adamw(model, fused=k.cuda)
    loader = DataLoader(
        _Slices(len(arrays[0]) * 1000, *arrays), batch_size=batch, shuffle=False,
        drop_last=True, num_workers=workers, persistent_workers=True, pin_memory=fixed,
    )  # fmt: skip
    next_batch = next_batches(loader)

    def loss_fn():
        x, y = (t.to(device, non_blocking=True) for t in next_batch())
        with k.ac:
            logits = model(x)
        return loss(logits, y)

    k.meta["num_workers"] = workers
    k.meta["pinned"] = fixed
    return k.train(opt, loss_fn)


def _quartznet(k: Kit, fixed: bool, device: str, rank: int):
    import numpy as np

    # H200, bf16: after the stride-2 stem 1,200 frames; the pointwise convolutions dominate: per
    # repeat 2 x 48 x 1,200 x C x C (256: 7.5 GFLOP, 512: 30), 3 repeats x 5 blocks of 256, 256,
    # 512, 512, 512 ch = ~300 GFLOP forward with the residuals and the 1,024 head, ~0.9 TFLOP a
    # step at ~300-400 TFLOP/s, ~2.5-3 ms; the depthwise convolutions (width 33-75: ~2 x 48 x
    # 1,200 x C x w, ~15 GFLOP, poorly served by cuDNN) ~1-2 ms; BatchNorm and ReLU over ~2 GB
    # with the backward, ~1 ms: ~5-7 ms of GPU against ~150 kernels (~2-3 ms of host). The 36.9
    # MB a step from pageable memory (the workers' shared memory): ~4-6 ms (v165's 128 MB ~16
    # ms more than pinned), the host blocked and the GPU idle until it is done; pinned by the
    # loader's thread beside the step (~4-5 ms of host copy) and copied at ~25 GB/s (~1.5 ms) in
    # stream order: ~11-14 ms planted, ~7-9 fixed, ~30 % off. Loading, the same in both: each
    # worker collates 36.9 MB into shared memory (~10-25 ms): a batch every ~3-6 ms from 4
    nn, F = k.nn, k.F
    mels, frames, batch, phones, workers, pool = (
        (8, 64, 2, 5, 1, 4) if k.quick else (80, 2400, 48, 48, 4, 96)
    )
    blocks = (
        ((16, 5), (16, 7), (32, 9))
        if k.quick
        else ((256, 33), (256, 39), (512, 51), (512, 63), (512, 75))
    )
    repeats = 1 if k.quick else 3

    def sep(ci: int, co: int, w: int, dil: int = 1, stride: int = 1):
        pad = dil * (w // 2)
        return [
            nn.Conv1d(ci, ci, w, stride, pad, dil, groups=ci, bias=False),
            nn.Conv1d(ci, co, 1, bias=False),
            nn.BatchNorm1d(co),
        ]

    class Block(nn.Module):
        def __init__(self, ci: int, co: int, w: int) -> None:
            super().__init__()
            layers: list = []
            c = ci
            for r in range(repeats):
                layers += sep(c, co, w)
                if r < repeats - 1:
                    layers.append(nn.ReLU())
                c = co
            self.body = nn.Sequential(*layers)
            self.res = nn.Sequential(nn.Conv1d(ci, co, 1, bias=False), nn.BatchNorm1d(co))

        def forward(self, x):
            return F.relu(self.body(x) + self.res(x))

    c0 = blocks[0][0]
    layers: list = [*sep(mels, c0, 33 if not k.quick else 5, stride=2), nn.ReLU()]
    c = c0
    for co, w in blocks:
        layers.append(Block(c, co, w))
        c = co
    head = 87 if not k.quick else 7
    layers += [*sep(c, c, head, dil=2), nn.ReLU()]
    layers += [
        nn.Conv1d(c, 2 * c, 1),
        nn.BatchNorm1d(2 * c),
        nn.ReLU(),
        nn.Conv1d(2 * c, phones, 1),
    ]
    model = nn.Sequential(*layers).to(device)
    rng = np.random.default_rng(233)
    feats = rng.standard_normal((pool, mels, frames), dtype=np.float32)
    labels = rng.integers(0, phones, (pool, frames // 2), dtype=np.int64)

    def loss(logits, y):
        return F.cross_entropy(logits.float(), y)

    k.meta["bytes_per_step"] = batch * mels * frames * 4 + batch * (frames // 2) * 8
    step = _loaded_step(k, model, fixed, device, (feats, labels), (batch, workers), loss)
    return step, batch, model


# ---------------------------------------------------------------- v234: Transformer-XL, pin (null)


def _transformer_xl(k: Kit, fixed: bool, device: str, rank: int):
    import numpy as np

    # H200, bf16: 151 M parameters in the layers (12 x 12.6 M) and 65.5 M in the untied
    # embedding and head; 8,192 tokens a step: 6 x 151 M x 8,192 = 7.4 TFLOP, the head's 6 x 32.8
    # M x 8,192 = 1.6, attention over 1,024 keys per query 12 x 4 x 8,192 x 1,024 x 1,024 x 3 =
    # 1.2: ~10 TFLOP a step at ~400-500 TFLOP/s, ~20-25 ms; the fused AdamW over 216 M
    # parameters ~2.6 GB, ~1 ms: ~22-28 ms of GPU against ~600 kernels (~8-12 ms of host):
    # GPU-bound. The batch is 16 x 512 x 2 int64 = 131 KB: ~20-40 us of copy pageable or pinned
    torch, nn, F = k.torch, k.nn, k.F
    layers, d, heads, seg, batch, vocab, workers = (
        (2, 32, 2, 16, 2, 100, 1) if k.quick else (12, 1024, 16, 512, 16, 32_000, 2)
    )

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, mem, mask):
            b, n, _ = x.shape
            h = self.ln1(x)
            ctx = torch.cat([mem, h], 1)  # the cached segment (detached) and this one
            q = self.q(h).view(b, n, heads, -1).transpose(1, 2)
            kk, v = self.kv(ctx).view(b, ctx.shape[1], 2, heads, -1).permute(2, 0, 3, 1, 4)
            att = F.scaled_dot_product_attention(q, kk, v, attn_mask=mask)
            x = x + self.o(att.transpose(1, 2).reshape(b, n, d))
            return x + self.mlp(self.ln2(x)), h.detach()

    class TransformerXL(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.mems: list = []

        def forward(self, tokens):
            b, n = tokens.shape
            if not self.mems:
                self.mems = [tokens.new_zeros(b, n, d, dtype=torch.float32)] * len(self.layers)
            # each query sees the whole cached segment and this segment up to itself
            mask = torch.ones(n, 2 * n, dtype=torch.bool, device=tokens.device).tril(n)
            x = self.emb(tokens)
            new = []
            for layer, mem in zip(self.layers, self.mems, strict=True):
                x, h = layer(x, mem.to(x.dtype), mask)
                new.append(h)
            self.mems = new
            return self.head(self.ln(x))

    model = TransformerXL().to(device)
    rng = np.random.default_rng(234)
    stream = rng.integers(0, vocab, (64, seg + 1), dtype=np.int64)
    inputs, targets = np.ascontiguousarray(stream[:, :-1]), np.ascontiguousarray(stream[:, 1:])

    def loss(logits, y):
        return F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))

    k.meta["bytes_per_step"] = 2 * batch * seg * 8
    step = _loaded_step(k, model, fixed, device, (inputs, targets), (batch, workers), loss)
    return step, batch, model


# ---------------------------------------------------------------- v235: FractalNet, bf16 (null)


def _fractalnet(k: Kit, fixed: bool, device: str, rank: int):
    # H200, cuDNN TF32, NCHW: 5 blocks of 7 convolutions (columns of 1, 2 and 4) at 32, 16, 8, 4
    # and 2 px, 64-512 ch: ~1.2 GFLOP an image forward, x 32 x 3 = ~0.11 TFLOP a step, ~1-1.5 ms
    # at the small sizes' ~80-100 TFLOP/s; BatchNorm, ReLU, the joins' means and the pools ~0.3
    # ms: ~1.5-2 ms of GPU against 35 convolutions with their BatchNorm and ReLU, 5 joins and 5
    # pools forward (~130 kernels), ~260 backward and the fused AdamW: ~400 launches, ~6-10 ms of
    # host: host-bound. bf16 in channels_last shortens kernels the GPU already finishes before
    # the next launch arrives, and adds autocast's casts of the weights: ~0
    nn = k.nn
    side, batch, widths, classes = (
        (8, 2, (4, 8), 10) if k.quick else (32, 32, (64, 128, 256, 512, 512), 100)
    )
    columns = 3

    def cbr(ci: int, co: int):
        return nn.Sequential(
            nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU()
        )

    class Fractal(nn.Module):
        """f_1 = conv; f_{c+1}(x) = join(conv(x), f_c(f_c(x))): column j a chain of 2**j convs."""

        def __init__(self, ci: int, co: int, c: int) -> None:
            super().__init__()
            self.conv = cbr(ci, co)
            self.deep = (
                nn.ModuleList([Fractal(ci, co, c - 1), Fractal(co, co, c - 1)]) if c > 1 else None
            )

        def forward(self, x):
            if self.deep is None:
                return self.conv(x)
            a, b = self.deep
            return (self.conv(x) + b(a(x))) / 2

    stages: list = []
    ci = 3
    for co in widths:
        stages += [Fractal(ci, co, columns), nn.MaxPool2d(2)]
        ci = co
    model = nn.Sequential(
        *stages, nn.Flatten(), nn.Linear(ci * (side >> len(widths)) ** 2, classes)
    )
    k.meta["convolutions"] = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    return _classifier_step(k, model.to(device), fixed, device, 235, (batch, side, classes))


BUILDERS = {
    "v230": _graphsage,
    "v231": _ncf,
    "v232": _squeezenet,
    "v233": _quartznet,
    "v234": _transformer_xl,
    "v235": _fractalnet,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
