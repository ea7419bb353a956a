#!/usr/bin/env python3
"""torch_gpt2.py - the PyTorch peer of troupe-bench-train (bench/train).

The same GPT-2 (pre-norm blocks, tanh GELU, tied output head, vocab 50304,
T=1024) trained the usual fast way in PyTorch: bf16 autocast over fp32
weights, F.scaled_dot_product_attention(is_causal=True), fused AdamW
(0.9/0.95, weight decay on 2-D tensors only), grad clipping at 1.0. Run eager
and under torch.compile. One step = zero_grad + forward + backward + clip +
step, timed with a synchronised host clock; the median of the timed steps is
reported, MFU with llm.c's 6N + 6LCT against 989 TFLOP/s.

    python3 torch_gpt2.py --model 124M --batch 16 --modes eager,compile --json out.json
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAK = 989e12
MODELS = {"124M": (12, 768, 12), "350M": (24, 1024, 16)}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, T=1024, Vp=50304):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.head = nn.Linear(C, Vp, bias=False)
        self.head.weight = self.wte.weight  # tied
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def bench(model_name, B, mode, steps, warmup):
    L, C, NH = MODELS[model_name]
    T = 1024
    torch.manual_seed(0)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = GPT(L, C, NH).cuda()
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if mode == "compile" else model
    idx = torch.randint(0, 50257, (B, T), device="cuda")
    tgt = torch.randint(0, 50257, (B, T), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    t_compile = time.time()
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t_compile = time.time() - t_compile
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    fpt = 6 * n_params + 6 * L * C * T
    tok_s = B * T / (ms * 1e-3)
    peak = torch.cuda.max_memory_allocated()
    r = {"impl": "pytorch-" + mode, "model": model_name, "params": n_params, "B": B, "T": T, "step_ms": ms,
         "tok_s": tok_s, "mfu": fpt * tok_s / PEAK, "loss": float(loss), "peak_gib": peak / 2**30,
         "peak_bytes_per_param": peak / n_params, "warmup_s": t_compile}
    del model, opt, fwd
    torch.cuda.empty_cache()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="124M")
    ap.add_argument("--batch", default="16")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    out = []
    for mode in a.modes.split(","):
        for B in (int(b) for b in a.batch.split(",")):
            try:
                r = bench(a.model, B, mode, a.steps, a.warmup)
            except torch.cuda.OutOfMemoryError:
                print(f"{a.model} {mode} B={B}: out of memory", flush=True)
                torch.cuda.empty_cache()
                continue
            out.append(r)
            print(f"{r['impl']:16s} {r['model']:5s} B={B:3d} step {r['step_ms']:8.2f} ms  {r['tok_s']:9.0f} tok/s  "
                  f"MFU {100 * r['mfu']:5.1f}%  peak {r['peak_gib']:6.2f} GiB ({r['peak_bytes_per_param']:.1f} B/param)"
                  f"  warmup {r['warmup_s']:.0f}s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "results": out}, f,
                      indent=1)


if __name__ == "__main__":
    main()
