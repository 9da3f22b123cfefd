"""The ninth blind part's cases v155-v159 (merged by record_blind9.py): a 4 x batch on a
MobileBERT-style masked LM whose 24 thin layers of small kernels leave the GPU idle at batch 8
(v155); two pairs chosen to gain nothing: cudnn.benchmark on a VoVNet-style CNN whose
convolutions are plain 3x3 and 1x1 ones, bf16 channels-last, that cuDNN's heuristics already
serve (v156), and one loss.item() at the end of a long GPU-bound LinkNet-style segmenter step
(v157); and two 2-GPU pairs: a SpanBERT-style span-masked LM whose rank 1 tokenises and masks its
samples in the training process while rank 0 has DataLoader workers (v158), and a BLOOM-style
decoder whose gradients are all-reduced in one go after backward instead of in DDP's buckets
during it (v159).

Sizes come from FLOP, byte and launch counts (one line beside each), not from timings: nothing
here was run on a GPU before the part was fixed.
"""

from __future__ import annotations

import random
import sys
import unicodedata
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from record_common import Kit  # noqa: E402

CASES: dict[str, dict] = {
    "v155": {
        "name": "batch_size",
        "model": "MobileBERT-style masked LM (vocab 30522 embedded d 128, a trigram embedding "
        "concatenated to 384 and projected to 512 with learned positions; 24 layers, each "
        "bottlenecked 512-128: a shared 128-d query/key input, 4 heads of 32, explicit "
        "attention, 4 stacked feed-forward nets 128-512-128 with ReLU, NoNorm (an elementwise "
        "affine) in place of LayerNorm, projected back to 512; the MLM head on 20 pre-chosen "
        "positions a sequence, its decoder the embedding table joined to a 384-d extra one), "
        "sequences of 128 tokens, fp32 (TF32 off for matmuls), AdamW(fused=True): thousands of "
        "small kernels a step, the GPU idle between launches",
        "planted": "batch 8",
        "fix": "batch 32 (4 x B, per-sample time)",
        "expected_fix": "batch_size",
        "bound": "per_sample_time",
        "batch_multiple": 4,
    },
    "v156": {
        "name": "null_cudnn_benchmark",
        "model": "VoVNet-39-style CNN (a stem of three 3x3 convs 64-64-128, two strided; 4 "
        "stages of 1/1/2/2 one-shot aggregation modules, each five 3x3 convs of 128/160/192/224 "
        "ch whose outputs are concatenated once with the module input and reduced by a 1x1 conv "
        "to 256/512/768/1024 ch; BatchNorm, ReLU, 3x3 max pools between stages; 1000 classes) "
        "on 224x224 images, batch 96, bf16 autocast, channels_last: only plain 3x3 and 1x1 "
        "convolutions at channel counts that are multiples of 32 (except the stem's RGB input)",
        "planted": "torch.backends.cudnn.benchmark = False",
        "fix": "torch.backends.cudnn.benchmark = True (gains ~0: every convolution is a plain 3x3 "
        "or 1x1 one, bf16 channels-last, at common sizes, for which cuDNN's heuristics already "
        "pick the kernel the benchmark would)",
        "expected_fix": "cudnn_benchmark",
        "null": True,
    },
    "v157": {
        "name": "null_host_sync",
        "model": "LinkNet-style segmenter (ResNet-18-style encoder: a strided 7x7 stem 64 ch, "
        "max pool, basic blocks 64/128/256/512 ch, 2 per stage, BatchNorm; 4 decoder blocks of "
        "a 1x1 conv to a quarter of the channels, a strided 3x3 transposed conv and a 1x1 conv, "
        "each added to the encoder feature of its scale; a final strided 3x3 transposed conv 32 "
        "ch to full size, a 3x3 conv and a 1x1 conv to 12 classes per pixel) on 512x512 images, "
        "batch 32, bf16 autocast, channels_last, AdamW(fused=True): a long GPU-bound step of "
        "long kernels",
        "planted": "loss.item() once per step, after the optimizer step, for the log",
        "fix": "the log summed on the GPU (gains ~0: one sync at the end of a GPU-bound step, "
        "whose first kernels are large convolutions that outlast their launch)",
        "expected_fix": "host_sync",
        "null": True,
    },
    "v158": {
        "name": "dataloader_workers_straggler",
        "model": "SpanBERT-style span-masked LM (a WordPiece vocabulary of 4599 pieces, 12 "
        "post-norm layers d 768, 12 heads, scaled_dot_product_attention, MLP 3072 with GELU; the "
        "MLM head, tied to the embeddings, on up to 40 masked positions a sequence) under DDP "
        "on 2 GPUs, batch 32 sequences of 256 tokens per rank, bf16 autocast; each sample made "
        "in Python in the Dataset from raw text: BERT's basic tokenisation character by "
        "character (control and whitespace cleaning, lower case, accents stripped, punctuation "
        "split), greedy longest-match WordPiece, then whole-word spans of geometric length (at "
        "most 10 words) masked up to 15 % of the tokens (80 % [MASK], 10 % random, 10 % kept)",
        "planted": "rank 1 builds its DataLoader with num_workers=0 (rank 0 with 6 workers): "
        "rank 1 tokenises and masks its 32 samples in the training process each step, so it is "
        "the pace-setter and rank 0 waits in every all-reduce",
        "fix": "rank 1's DataLoader with the same 6 workers (persistent_workers=True) as rank 0",
        "expected_fix": "dataloader_workers",
        "gpus": 2,
    },
    "v159": {
        "name": "overlap_communication",
        "model": "BLOOM-style decoder LM (vocab 16384, embeddings tied to the output and "
        "LayerNorm-ed; 8 pre-norm layers d 2048, 16 heads, ALiBi attention biases instead of "
        "positions, causal scaled_dot_product_attention, MLP 8192 with GELU; 436 M parameters) "
        "under DDP on 2 GPUs, batch 4 sequences of 512 tokens per rank, bf16 autocast, "
        "AdamW(fused=True): 1.7 GB of fp32 gradients a step beside a short backward",
        "planted": "forward and backward under DDP's no_sync(), then all the gradients "
        "flattened into one buffer and all-reduced at once after backward ends, copied back, "
        "before the optimizer step: no communication overlaps the backward",
        "fix": "DDP's defaults (bucket_cap_mb=25): each bucket all-reduced as soon as backward "
        "has made its gradients, overlapping the rest of the backward",
        "expected_fix": "overlap_communication",
        "gpus": 2,
    },
}


def _mobilebert(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # ~48 kernels a layer forward (13 small Linears, 12 NoNorm mul/add pairs, explicit attention)
    # and ~95 backward: ~3500 a step with the embeddings, head and fused AdamW (~1100 tensors, a
    # few multi-tensor kernels): ~25-30 ms of host launches. The GPU at batch 8 (1024 tokens,
    # 0.5 MB activations of d 128): 120 GFLOP of fp32 matmuls (TF32 off, ~3 ms) and every
    # other kernel ~2 us: ~10 ms; at batch 32 (4096 tokens) 470 GFLOP of fp32 matmuls (~10-12
    # ms) and the rest ~2-3 us each (~8 ms): ~20 ms, still under the host's ~25-28 ms: both
    # launch-bound, 4 x samples for about the same step (~65-75 % off the time per sample)
    vocab, emb, hid, bott, heads, ffn, stacked, layers, seq, masked, batch = (
        (100, 8, 32, 8, 2, 32, 2, 2, 16, 3, 2)
        if k.quick
        else (30522, 128, 512, 128, 4, 512, 4, 24, 128, 20, 8)
    )
    batch *= 4 if fixed else 1

    class NoNorm(nn.Module):  # MobileBERT's elementwise affine in place of LayerNorm
        def __init__(self, d: int) -> None:
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

        def forward(self, x):
            return x * self.weight + self.bias

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp, self.n_inp = nn.Linear(hid, bott), NoNorm(bott)
            self.shared, self.n_shared = nn.Linear(hid, bott), NoNorm(bott)
            self.q, self.k, self.v = (
                nn.Linear(bott, bott),
                nn.Linear(bott, bott),
                nn.Linear(hid, bott),
            )
            self.o, self.n_o = nn.Linear(bott, bott), NoNorm(bott)
            self.ffn = nn.ModuleList(
                nn.Sequential(nn.Linear(bott, ffn), nn.ReLU(), nn.Linear(ffn, bott))
                for _ in range(stacked)
            )
            self.n_ffn = nn.ModuleList(NoNorm(bott) for _ in range(stacked))
            self.out, self.n_out = nn.Linear(bott, hid), NoNorm(hid)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.n_inp(self.inp(x))
            s = self.n_shared(self.shared(x))  # the query/key input, shared
            q, kk = (f(s).view(b, t, heads, -1).transpose(1, 2) for f in (self.q, self.k))
            v = self.v(x).view(b, t, heads, -1).transpose(1, 2)
            att = torch.softmax((q * q.shape[-1] ** -0.5) @ kk.transpose(-1, -2), -1)
            h = self.n_o(self.o((att @ v).transpose(1, 2).reshape(b, t, bott)) + h)
            for f, n in zip(self.ffn, self.n_ffn, strict=True):
                h = n(f(h) + h)
            return self.n_out(self.out(h) + x)

    class MobileBERT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, emb)
            self.proj = nn.Linear(3 * emb, hid)  # the trigram embedding, projected
            self.pos = nn.Parameter(torch.randn(seq, hid) * 0.02)
            self.n_emb = NoNorm(hid)
            self.layers = nn.Sequential(*[Layer() for _ in range(layers)])
            self.head = nn.Sequential(nn.Linear(hid, hid), nn.ReLU(), nn.LayerNorm(hid))
            self.extra = nn.Parameter(torch.randn(vocab, hid - emb) * 0.02)
            self.bias = nn.Parameter(torch.zeros(vocab))

        def forward(self, ids, where):  # (b, t) tokens, (b, m) masked positions
            e = self.tok(ids)
            tri = torch.cat([F.pad(e[:, 1:], (0, 0, 0, 1)), e, F.pad(e[:, :-1], (0, 0, 1, 0))], 2)
            x = self.layers(self.n_emb(self.proj(tri) + self.pos))
            h = self.head(x[torch.arange(x.shape[0], device=x.device)[:, None], where])
            return F.linear(h, torch.cat([self.tok.weight, self.extra], 1), self.bias)

    model = MobileBERT().to(device)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(155)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    where = torch.rand(batch, seq, generator=gen).argsort(1)[:, :masked].sort(1).values
    target = ids.gather(1, where).to(device)
    ids = ids.scatter(1, where, 103 % vocab).to(device)  # [MASK] at the chosen positions
    where = where.to(device)

    def loss_fn():
        return F.cross_entropy(model(ids, where).reshape(-1, vocab), target.reshape(-1))

    k.meta["batch_multiple"] = 4
    k.meta["tokens_per_step"] = batch * seq
    return k.train(opt, loss_fn), batch, model


def _vovnet(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # VoVNet-39 at 224x224: 7.1 GMAC an image forward (FlopCounter: the stage-2 and stage-3 OSA
    # modules at 56x56 and 28x28 most of it), x 96 x 2 x 3 = 4.0 TFLOP a step of bf16
    # channels-last 3x3 and 1x1 convs, ~10-12 ms; BatchNorm, ReLU, concatenations and pools ~25
    # GB (stage 2's 768-ch concat at 56x56: 0.46 GB a batch), ~10 ms; ~180 kernels forward and
    # ~360 backward (~5 ms of host): GPU-bound, ~22-25 ms. 39 convolutions of 18 distinct
    # shapes, all plain 3x3 (stride 1 or 2) or 1x1, 3-2144 ch in (multiples of 32 except the
    # stem's first), 64-1024 out: the implicit-GEMM kernels cuDNN's heuristics choose for these
    # are the benchmark's (v124's dense 3x3/1x1 RepVGG, fp32 NCHW, gained 1.9 %), so ~0-2 %
    img, batch, div = (32, 2, 8) if k.quick else (224, 96, 1)
    torch.backends.cudnn.benchmark = fixed

    def cbr(ci: int, co: int, ks: int, s: int = 1) -> list:
        return [nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co), nn.ReLU()]

    class OSA(nn.Module):  # one-shot aggregation: five 3x3 convs, concatenated once, 1x1
        def __init__(self, ci: int, mid: int, co: int) -> None:
            super().__init__()
            chans = [ci] + [mid] * 5
            self.convs = nn.ModuleList(nn.Sequential(*cbr(a, mid, 3)) for a in chans[:5])
            self.concat = nn.Sequential(*cbr(ci + 5 * mid, co, 1))

        def forward(self, x):
            outs = [x]
            for conv in self.convs:
                outs.append(conv(outs[-1]))
            return self.concat(torch.cat(outs, 1))

    class VoVNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            s = [64 // div, 64 // div, 128 // div]
            self.stem = nn.Sequential(
                *cbr(3, s[0], 3, 2), *cbr(s[0], s[1], 3), *cbr(s[1], s[2], 3, 2)
            )
            stages, ci = [], s[2]
            for i, (mid, co, n) in enumerate(
                [(128, 256, 1), (160, 512, 1), (192, 768, 2), (224, 1024, 2)]
            ):
                mid, co = mid // div, co // div
                mods = [nn.MaxPool2d(3, 2, ceil_mode=True)] if i else []
                for _ in range(n):
                    mods.append(OSA(ci, mid, co))
                    ci = co
                stages.append(nn.Sequential(*mods))
            self.stages = nn.Sequential(*stages)
            self.fc = nn.Linear(ci, 1000)

        def forward(self, x):
            return self.fc(self.stages(self.stem(x)).mean((2, 3)))

    model = VoVNet().to(device, memory_format=torch.channels_last)
    opt = k.adamw(model, fused=k.cuda)
    x = torch.randn(batch, 3, img, img, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)

    def loss_fn():
        with k.ac:
            return F.cross_entropy(model(x).float(), y)

    k.meta["torch_flags"] = {"cudnn_benchmark": fixed}
    k.meta["conv_layers"] = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    return k.train(opt, loss_fn), batch, model


def _linknet(k: Kit, fixed: bool, device: str, rank: int):
    torch, nn, F = k.torch, k.nn, k.F
    # 13.6 GMAC an image forward at 512x512 (FlopCounter: the ResNet-18 encoder ~9.5, the
    # decoders and the full-resolution final convs ~4), x 32 x 2 x 3 = 2.6 TFLOP a step of bf16
    # channels-last convs, ~8-10 ms; BatchNorm/ReLU/residual traffic (the stem's 64 x 256 x 256
    # maps 0.27 GB a batch) and the fp32 logits and cross-entropy over 32 x 12 x 512 x 512 (0.4
    # GB) ~27 GB, ~10-12 ms: ~20-24 ms of GPU against ~330 kernels forward and backward (~4 ms
    # of host).
    # The sync after the optimizer lets the host start the next step only when the GPU is
    # idle: the next step's first kernel, the 7x7 stem over 32 images, starts ~20-50 us later
    # and the queue refills at once: ~0.3 % of the step
    img, batch, div, classes = (64, 2, 8, 12) if k.quick else (512, 32, 1, 12)
    c = [64 // div, 128 // div, 256 // div, 512 // div]

    def cbr(ci: int, co: int, ks: int, s: int = 1) -> list:
        return [nn.Conv2d(ci, co, ks, s, ks // 2, bias=False), nn.BatchNorm2d(co), nn.ReLU()]

    def up(ci: int, co: int, ks: int) -> list:  # a strided transposed conv doubling the size
        return [
            nn.ConvTranspose2d(ci, co, ks, 2, (ks - 1) // 2, output_padding=ks % 2, bias=False),
            nn.BatchNorm2d(co), nn.ReLU(),
        ]  # fmt: skip

    class Basic(nn.Module):
        def __init__(self, ci: int, co: int, s: int) -> None:
            super().__init__()
            self.body = nn.Sequential(*cbr(ci, co, 3, s)[:2], nn.ReLU(), *cbr(co, co, 3)[:2])
            self.short = (
                nn.Sequential(nn.Conv2d(ci, co, 1, s, bias=False), nn.BatchNorm2d(co))
                if s > 1 or ci != co
                else nn.Identity()
            )

        def forward(self, x):
            return F.relu(self.body(x) + self.short(x))

    class LinkNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, c[0], 7, 2, 3, bias=False), nn.BatchNorm2d(c[0]), nn.ReLU(),
                nn.MaxPool2d(3, 2, 1),
            )  # fmt: skip
            self.enc = nn.ModuleList(
                nn.Sequential(Basic(ci, co, 1 if i == 0 else 2), Basic(co, co, 1))
                for i, (ci, co) in enumerate(zip([c[0], *c[:-1]], c, strict=True))
            )
            self.dec = nn.ModuleList(
                nn.Sequential(*cbr(m, m // 4, 1), *up(m // 4, m // 4, 3), *cbr(m // 4, n, 1))
                for m, n in zip(c, [c[0], *c[:-1]], strict=True)
            )
            self.final = nn.Sequential(
                *up(c[0], c[0] // 2, 3), *cbr(c[0] // 2, c[0] // 2, 3),
                nn.Conv2d(c[0] // 2, classes, 1),
            )  # fmt: skip

        def forward(self, x):
            feats = [self.stem(x)]
            for enc in self.enc:
                feats.append(enc(feats[-1]))
            y = self.dec[3](feats[4]) + feats[3]
            for i in (2, 1):
                y = self.dec[i](y) + feats[i]
            return self.final(self.dec[0](y))

    model = LinkNet().to(device, memory_format=torch.channels_last)
    opt = k.adamw(model, fused=k.cuda)
    gen = torch.Generator().manual_seed(157)
    x = torch.rand(batch, 3, img, img, generator=gen).to(device)
    x = x.to(memory_format=torch.channels_last)
    # smooth label maps: nearest-upsampled class blocks
    target = torch.randint(0, classes, (batch, 1, img // 16, img // 16), generator=gen)
    target = F.interpolate(target.float(), size=(img, img), mode="nearest")[:, 0].long()
    target = target.to(device)
    tot = torch.zeros((), device=device)
    seen: list[float] = []

    def step():
        with k.ac:
            loss = F.cross_entropy(model(x).float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if fixed:  # the log summed on the GPU
            tot.add_(loss.detach())
        else:  # one sync at the end of the step
            seen.append(loss.item())

    k.meta["syncs_per_step"] = 0 if fixed else 1
    return step, batch, model


_PUNCT = ",.;:!?"
_MASK, _UNK, _CLS, _SEP, _PAD = 4, 1, 2, 3, 0


class SpanCorpus:
    """v158's dataset: ``docs`` raw-text documents of ``words`` words (made once, from seed 158:
    a lexicon of 3000 letter strings drawn by Zipf's law, some capitalised or followed by
    punctuation) and a WordPiece vocabulary over them (the specials, every letter, the
    punctuation, the commoner half of the lexicon whole and 3-letter prefixes and suffixes of
    the rest). Sample ``i`` of shard ``shard`` (of 2) is document ``2 i + shard``, made per call
    in Python: BERT's basic tokenisation (controls dropped, whitespace mapped, CJK isolated,
    lower case, accents stripped by NFD, punctuation split, each character checked by
    ``unicodedata``), greedy longest-match WordPiece, [CLS] and [SEP], cut to ``seq``; whole-word
    spans of geometric length (at most 10 words) masked until 15 % of the tokens are (80 %
    [MASK], 10 % a random piece, 10 % kept), seeded by the sample. Returns (``seq`` token ids,
    ``slots`` masked positions, their ``slots`` targets, -100 past the masked count)."""

    def __init__(self, docs: int, words: int, seq: int, slots: int, shard: int) -> None:
        rng = random.Random(158)
        letters = "etaoinshrdlcumwfgypbvkjxqz"
        freq = [12, 9, 8, 8, 7, 7, 6, 6, 6, 4, 4, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1]
        lex = sorted(
            {"".join(rng.choices(letters, freq, k=rng.randint(2, 11))) for _ in range(3000)}
        )
        zipf = [1 / (r + 1) for r in range(len(lex))]
        self.docs = []
        for _ in range(docs):
            out = []
            for w in rng.choices(lex, zipf, k=words):
                w = w.capitalize() if rng.random() < 0.1 else w
                out.append(w + (rng.choice(_PUNCT) if rng.random() < 0.12 else ""))
            self.docs.append(" ".join(out))
        pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *_PUNCT]
        pieces += ["##" + c for c in letters] + lex[: len(lex) // 2]
        for w in lex[len(lex) // 2 :]:
            pieces += [w[:3], "##" + w[3:6], "##" + w[-3:]]
        self.vocab = {p: i for i, p in enumerate(dict.fromkeys(pieces))}
        self.seq, self.slots, self.shard = seq, slots, shard

    def __len__(self) -> int:
        return 1_000_000

    def words(self, text: str) -> list[str]:
        """BERT's basic tokenisation of ``text``, character by character."""
        clean = []
        for ch in text:
            cp = ord(ch)
            if cp in (0, 0xFFFD) or (unicodedata.category(ch)[0] == "C" and ch not in "\t\n\r"):
                continue
            if 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF:
                clean += [" ", ch, " "]
            elif ch in " \t\n\r" or unicodedata.category(ch) == "Zs":
                clean.append(" ")
            else:
                clean.append(ch)
        out = []
        for tok in "".join(clean).split():
            tok = unicodedata.normalize("NFD", tok.lower())
            cur: list[str] = []
            for ch in tok:
                cp, cat = ord(ch), unicodedata.category(ch)
                if cat == "Mn":  # an accent
                    continue
                if (
                    33 <= cp <= 47
                    or 58 <= cp <= 64
                    or 91 <= cp <= 96
                    or 123 <= cp <= 126
                    or (cat[0] == "P")
                ):
                    if cur:
                        out.append("".join(cur))
                        cur = []
                    out.append(ch)
                else:
                    cur.append(ch)
            if cur:
                out.append("".join(cur))
        return out

    def __getitem__(self, i: int):
        import torch

        n = 2 * i + self.shard
        rng, vocab = random.Random(n), self.vocab
        ids, starts = [_CLS], []
        for w in self.words(self.docs[n % len(self.docs)]):  # greedy longest-match WordPiece
            if len(ids) >= self.seq - 1:
                break
            starts.append(len(ids))
            s, sub = 0, []
            while s < len(w):
                for e in range(len(w), s, -1):
                    piece = w[s:e] if s == 0 else "##" + w[s:e]
                    if piece in vocab:
                        sub.append(vocab[piece])
                        break
                else:
                    sub = [_UNK]
                    break
                s = e
            ids += sub
        ids = [*ids[: self.seq - 1], _SEP]
        starts = [s for s in starts if s < len(ids) - 1] + [len(ids) - 1]
        budget = min(self.slots, int(0.15 * (len(ids) - 2)))
        where: list[int] = []
        taken = set()
        while len(where) < budget:  # whole-word spans of geometric length
            span = min(10, 1 + int(rng.expovariate(0.22)))
            w = rng.randrange(len(starts) - 1)
            for t in range(starts[w], starts[min(w + span, len(starts) - 1)]):
                if t not in taken and len(where) < budget:
                    taken.add(t)
                    where.append(t)
        where.sort()
        target = [ids[t] for t in where]
        for t in where:
            r = rng.random()
            ids[t] = _MASK if r < 0.8 else (rng.randrange(5, len(vocab)) if r < 0.9 else ids[t])
        pad = self.slots - len(where)
        return (
            torch.tensor(ids + [_PAD] * (self.seq - len(ids))),
            torch.tensor(where + [0] * pad),
            torch.tensor(target + [-100] * pad),
        )


def _spanbert_ddp(k: Kit, fixed: bool, device: str, rank: int):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    torch, nn, F = k.torch, k.nn, k.F
    # per rank 8192 tokens x 85 M body parameters x 6 = 4.2 TFLOP a step of bf16 matmuls,
    # ~8-9 ms, memory-efficient attention (the padding mask) ~0.5-1 ms, LayerNorm/GELU/residual
    # traffic ~7 GB ~3 ms, fused AdamW over 89 M parameters ~1 ms, the 360 MB all-reduce
    # overlapped: ~13-15 ms on the GPU, ~600 kernels (~6 ms of host). Loading: ~1.9 ms a
    # sample on the 2-core CPU this was written on (BERT's per-character basic tokenisation
    # most of it), ~1-1.9 ms on the device's: planted, rank 1 spends ~30-60 ms a step making
    # its 32 samples before its forward and rank 0 waits in the all-reduce: ~45-75 ms a step
    # against ~15 ms with 6 workers a rank (each batch ~30-60 ms of one worker, 6 in flight)
    docs, words, seq, slots, d, layers, heads, batch, workers = (
        (16, 40, 32, 6, 32, 2, 2, 2, 2) if k.quick else (1024, 230, 256, 40, 768, 12, 12, 32, 6)
    )
    data = SpanCorpus(docs, words, seq, slots, rank)
    vocab = len(data.vocab)

    class Layer(nn.Module):  # post-norm, as BERT
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, keep):
            b, t, _ = x.shape
            q, kk, v = self.qkv(x).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v, attn_mask=keep)
            x = self.n1(x + self.o(a.transpose(1, 2).reshape(b, t, d)))
            return self.n2(x + self.ff(x))

    class SpanBERT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.n_emb = nn.LayerNorm(d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
            self.bias = nn.Parameter(torch.zeros(vocab))

        def forward(self, ids, where):
            keep = (ids != _PAD)[:, None, None, :]  # padding keys masked out
            x = self.n_emb(self.tok(ids) + self.pos.weight[: ids.shape[1]])
            for layer in self.layers:
                x = layer(x, keep)
            h = self.head(x[torch.arange(x.shape[0], device=x.device)[:, None], where])
            return F.linear(h, self.tok.weight, self.bias)  # tied to the embeddings

    model = SpanBERT().to(device)
    ids_ = [torch.device(device).index] if k.cuda else None
    run = DDP(model, device_ids=ids_)
    opt = k.adamw(model, fused=k.cuda)
    by_rank = [workers, workers] if fixed else [workers, 0]
    kw = {"num_workers": workers, "persistent_workers": True} if by_rank[rank] else {}
    loader = DataLoader(data, batch_size=batch, drop_last=True, **kw)
    it = iter(loader)

    def loss_fn():
        ids, where, target = (t.to(device, non_blocking=True) for t in next(it))
        with k.ac:
            logits = run(ids, where)
        return F.cross_entropy(logits.float().reshape(-1, vocab), target.reshape(-1))

    k.meta["num_workers"] = by_rank[rank]
    k.meta["num_workers_by_rank"] = by_rank
    k.meta["extra_work_rank"] = 1
    k.meta["vocab"] = vocab
    return k.train(opt, loss_fn), batch, model


def _bloom_ddp(k: Kit, fixed: bool, device: str, rank: int):
    import math

    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch, nn, F = k.torch, k.nn, k.F
    # 8 layers x 50.3 M + 33.6 M embeddings = 436 M parameters; per rank 2048 tokens x 403 M x 6
    # = 5.0 TFLOP a step of bf16 matmuls (d 2048, ~600 TFLOP/s), ~8-9 ms, attention with the
    # ALiBi bias ~0.5 ms, the weight casts to bf16 and their gradients back ~5 GB ~2 ms:
    # forward and backward ~11 ms on the GPU against ~450 kernels (~4 ms of host). Fused AdamW
    # over 436 M parameters ~12 GB ~4-5 ms. The 1.74 GB of fp32 gradients all-reduced over
    # NVLink at ~350-450 GB/s: ~4-5 ms, and planted copies them into one buffer before it and
    # back after it (7 GB, ~2.5 ms), all after the backward: ~22-24 ms. DDP copies into its 25
    # MB buckets during the backward, all-reduces each as it fills (the first layers' grads
    # last: ~0.3-0.5 ms of tail) and copies back after it (~1.2 ms): ~17-19 ms, the backward
    # perhaps ~1 ms slower beside NCCL's kernels: ~15-25 % off the step
    vocab, d, layers, heads, seq, batch = (
        (256, 32, 2, 4, 16, 2) if k.quick else (16384, 2048, 8, 16, 512, 4)
    )

    class Layer(nn.Module):  # pre-norm
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x, bias):
            b, t, _ = x.shape
            q, kk, v = self.qkv(self.n1(x)).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, kk, v, attn_mask=bias.to(q.dtype))
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            return x + self.ff(self.n2(x))

    class BLOOM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.n_emb, self.n_out = nn.LayerNorm(d), nn.LayerNorm(d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))

        def forward(self, idx, bias):
            x = self.n_emb(self.tok(idx))
            for layer in self.layers:
                x = layer(x, bias)
            return F.linear(self.n_out(x), self.tok.weight)  # tied

    model = BLOOM().to(device)
    # ALiBi: head h's bias -slope_h x distance to each earlier key, -inf to the later ones; a
    # plain tensor, not a buffer (DDP would broadcast it every forward)
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)])
    pos = torch.arange(seq)
    dist_back = (pos[None, :] - pos[:, None]).float()  # key - query
    bias = (slopes[:, None, None] * dist_back).masked_fill(dist_back > 0, -math.inf).to(device)
    gen = torch.Generator().manual_seed(159 + rank)
    idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(device)
    dev_ids = [torch.device(device).index] if k.cuda else None
    run = DDP(model, device_ids=dev_ids)
    opt = k.adamw(model, fused=k.cuda)
    world = dist.get_world_size()
    params = [p for p in model.parameters() if p.requires_grad]

    def loss_fn():
        with k.ac:
            logits = run(idx[:, :-1], bias)
        return F.cross_entropy(logits.float().reshape(-1, vocab), idx[:, 1:].reshape(-1))

    def step():
        opt.zero_grad(set_to_none=True)
        if fixed:  # DDP's buckets all-reduced during the backward
            loss_fn().backward()
        else:  # no communication in the backward; every gradient all-reduced after it
            with run.no_sync():
                loss_fn().backward()
            grads = [p.grad for p in params]
            flat = _flatten_dense_tensors(grads)
            flat.div_(world)  # as DDP: each rank's share, then summed
            dist.all_reduce(flat)
            torch._foreach_copy_(grads, list(_unflatten_dense_tensors(flat, grads)))
        opt.step()

    n_params = sum(p.numel() for p in params)
    k.meta["ddp"] = (
        "defaults (bucket_cap_mb=25)"
        if fixed
        else "no_sync(); one all_reduce of the flattened gradients after backward"
    )
    k.meta["overlapped"] = fixed
    k.meta["params"] = n_params
    k.meta["grad_bytes_allreduced"] = 4 * n_params
    return step, batch, model


BUILDERS = {
    "v155": _mobilebert,
    "v156": _vovnet,
    "v157": _linknet,
    "v158": _spanbert_ddp,
    "v159": _bloom_ddp,
}
"""Each case's builder: (kit, fixed, device, rank) -> (step_fn, samples_per_step, model)."""
