#!/usr/bin/env python3
"""Trains the built-in MoE (or its dense baseline) on the tokenised corpus, on the CPU.

usage: nice -n 19 /usr/bin/python3 tools/train/train.py --out build-train/moe [--dense]
           [--steps N | --time-budget SECONDS] [--corpus build-corpus] [--threads 1]

Every batch row is a window of n_ctx+1 tokens from one domain, the domain drawn
uniformly (so small domains are revisited more), the offset uniform; all from one
seeded generator. AdamW, linear warmup then cosine decay to 10 %; cross-entropy on
every position plus 0.01 x the switch load-balancing loss. With --time-budget the
step count is fixed after the first 8 timed steps (steps = budget / seconds per step)
and printed; pass --steps to reproduce a run exactly. Writes OUT/ckpt.pt every
--ckpt-every steps and at the end, and OUT/log.jsonl.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, MoEModel  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--corpus", default="build-corpus")
ap.add_argument("--out", required=True)
ap.add_argument("--dense", action="store_true", help="dense baseline: 1 expert, n_ff = 2 x expert n_ff")
ap.add_argument("--layers", type=int, default=6)
ap.add_argument("--embd", type=int, default=256)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--kv-heads", type=int, default=2)
ap.add_argument("--experts", type=int, default=8)
ap.add_argument("--top-k", type=int, default=2)
ap.add_argument("--ff", type=int, default=512, help="hidden size of one expert")
ap.add_argument("--ctx", type=int, default=256)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--lr", type=float, default=2e-3)
ap.add_argument("--min-lr-frac", type=float, default=0.1)
ap.add_argument("--warmup", type=int, default=50)
ap.add_argument("--wd", type=float, default=0.1)
ap.add_argument("--aux", type=float, default=0.01)
ap.add_argument("--steps", type=int, default=0)
ap.add_argument("--time-budget", type=float, default=0)
ap.add_argument("--ckpt-every", type=int, default=50)
ap.add_argument("--eval-every", type=int, default=200)
ap.add_argument("--seed", type=int, default=1234)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--resume", default="", help="continue from this checkpoint's weights (and optimizer state if saved), "
                "at its step, under the schedule of --steps; the data stream is reseeded with seed + step")
ap.add_argument("--deadline", type=float, default=0,
                help="wall-clock budget in seconds: the lr follows the cosine by elapsed time (from --progress-from "
                "to 1) instead of by step, and training stops when the budget is spent")
ap.add_argument("--progress-from", type=float, default=0.0, help="with --deadline: schedule progress at the start")
ap.add_argument("--lockstep", default="", help="with --deadline (leader) writes each step's lr to this file; without "
                "(follower) takes step s's lr from it, waits for the leader, and stops where the leader stopped")
ap.add_argument("--rewarm", type=int, default=20, help="with --resume and no optimizer state: steps to ramp the lr back up")
args = ap.parse_args()
if not args.steps and not args.time_budget and not args.deadline and not args.lockstep:
    sys.exit("give --steps, --time-budget, --deadline or --lockstep")

torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)
os.makedirs(args.out, exist_ok=True)

domains = sorted(d for d in os.listdir(args.corpus) if os.path.isfile(os.path.join(args.corpus, d, "train.bin")))
train = {d: torch.from_numpy(np.fromfile(os.path.join(args.corpus, d, "train.bin"), dtype=np.uint16).astype(np.int64)) for d in domains}
held = {d: torch.from_numpy(np.fromfile(os.path.join(args.corpus, d, "heldout.bin"), dtype=np.uint16).astype(np.int64)) for d in domains}

if args.dense:
    cfg = Config(n_layer=args.layers, n_embd=args.embd, n_head=args.heads, n_head_kv=args.kv_heads,
                 n_expert=1, n_expert_used=1, n_ff=2 * args.ff, n_ctx=args.ctx)
else:
    cfg = Config(n_layer=args.layers, n_embd=args.embd, n_head=args.heads, n_head_kv=args.kv_heads,
                 n_expert=args.experts, n_expert_used=args.top_k, n_ff=args.ff, n_ctx=args.ctx)
model = MoEModel(cfg)
model.init_weights(args.seed)
start_step, resumed = 0, None
if args.resume:
    resumed = torch.load(args.resume, map_location="cpu")
    model.load_state_dict(resumed["model"])
    start_step = resumed["step"]
    print(f"resumed from {args.resume} at step {start_step} (optimizer state: {'optim' in resumed})", flush=True)
total, active = model.param_counts()
print(f"config {json.dumps(cfg.__dict__)}\nparameters: {total:,} total, {active:,} active", flush=True)

decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

if resumed is not None and "optim" in resumed:
    opt.load_state_dict(resumed["optim"])
gen = torch.Generator().manual_seed(args.seed + start_step)


def batch():
    di = torch.randint(len(domains), (args.batch,), generator=gen)
    rows = []
    for i in di.tolist():
        data = train[domains[i]]
        o = int(torch.randint(len(data) - args.ctx - 1, (1,), generator=gen))
        rows.append(data[o:o + args.ctx + 1])
    x = torch.stack(rows)
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def evaluate(n_windows=4):
    """Mean held-out NLL per domain over the first n_windows windows of n_ctx tokens."""
    model.eval()
    res = {}
    for d in domains:
        h = held[d]
        n = min(n_windows, (len(h) - 1) // args.ctx)
        x = torch.stack([h[i * args.ctx:(i + 1) * args.ctx + 1] for i in range(n)])
        logits, _, _ = model(x[:, :-1])
        res[d] = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), x[:, 1:].reshape(-1)).item()
    model.train()
    return res


def lr_at(step, total_steps):
    if resumed is not None and "optim" not in resumed and step < start_step + args.rewarm:
        return lr_sched(step, total_steps) * (step - start_step + 1) / args.rewarm
    return lr_sched(step, total_steps)


def lr_sched(step, total_steps):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = (step - args.warmup) / max(1, total_steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))


def save(step, total_steps, extra):
    tmp = os.path.join(args.out, "ckpt.pt.tmp")
    torch.save({"cfg": cfg.__dict__, "model": model.state_dict(), "optim": opt.state_dict(), "step": step, "total_steps": total_steps,
                "args": vars(args), **extra}, tmp)
    os.replace(tmp, os.path.join(args.out, "ckpt.pt"))


log = open(os.path.join(args.out, "log.jsonl"), "a")
total_steps = args.steps or 10**9
t0 = time.time()
t_timed = None
ema = None


def lr_by_progress(p):
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))


def lockstep_lr(step):
    """Follower: the leader's lr for `step`, or None once the leader has stopped before it."""
    while True:
        if os.path.exists(args.lockstep):
            with open(args.lockstep) as f:
                lines = f.read().split("\n")
            for ln in lines:
                parts = ln.split()
                if len(parts) == 2 and parts[0] == "end" and int(parts[1]) <= step:
                    return None
                if len(parts) == 2 and parts[0] == str(step):
                    return float(parts[1])
        time.sleep(0.5)


leader = bool(args.deadline and args.lockstep)
follower = bool(args.lockstep and not args.deadline)
if leader:
    open(args.lockstep, "w").close()
for step in range(start_step, 10**9):
    if step >= total_steps:
        break
    if args.deadline or follower:
        if args.deadline:
            el = time.time() - t0
            if el >= args.deadline:
                total_steps = step
                break
            lr = lr_by_progress(args.progress_from + (1 - args.progress_from) * el / args.deadline)
            if args.resume and "optim" not in resumed and step < start_step + args.rewarm:
                lr *= (step - start_step + 1) / args.rewarm
            if leader:
                with open(args.lockstep, "a") as f:
                    f.write(f"{step} {lr!r}\n")
        else:
            lr = lockstep_lr(step)
            if lr is None:
                total_steps = step
                break
        for g in opt.param_groups:
            g["lr"] = lr
    if step == start_step + 2:
        t_timed = time.time()
    if args.time_budget and not args.steps and step == start_step + 10:
        per = (time.time() - t_timed) / 8
        total_steps = max(20, int((args.time_budget - (time.time() - t0)) / (per * 1.03)) + step)
        print(f"{per:.2f} s/step, {args.batch * args.ctx / per:.0f} tokens/s -> {total_steps} steps", flush=True)
    if not (args.deadline or follower):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total_steps if total_steps < 10**9 else 10**6)
    x, y = batch()
    logits, aux, counts = model(x)
    ce = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), y.reshape(-1))
    loss = ce + args.aux * aux if cfg.n_expert > 1 else ce
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    ema = ce.item() if ema is None else 0.95 * ema + 0.05 * ce.item()
    if step % 10 == 0 or step == total_steps - 1:
        rec = {"step": step, "ce": round(ce.item(), 4), "ce_ema": round(ema, 4), "aux": round(float(aux), 4),
               "lr": round(opt.param_groups[0]["lr"], 6), "gnorm": round(float(gn), 3), "t": round(time.time() - t0, 1),
               "tokens": (step + 1) * args.batch * args.ctx}
        if cfg.n_expert > 1:
            rec["load_l0"] = counts[0].tolist()
        if (step % args.eval_every == 0 and step) or step == total_steps - 1:
            rec["heldout"] = {k: round(v, 4) for k, v in evaluate().items()}
        print(json.dumps(rec), flush=True)
        log.write(json.dumps(rec) + "\n")
        log.flush()
    if (step + 1) % args.ckpt_every == 0 or step == total_steps - 1:
        save(step + 1, total_steps, {"train_ce_ema": ema, "elapsed_s": time.time() - t0})
if leader:
    with open(args.lockstep, "a") as f:
        f.write(f"end {total_steps}\n")
final = evaluate(n_windows=16)
print(json.dumps({"final_heldout": final, "train_ce_ema": ema, "elapsed_s": round(time.time() - t0, 1),
                  "tokens": total_steps * args.batch * args.ctx}), flush=True)
save(total_steps, total_steps, {"train_ce_ema": ema, "elapsed_s": time.time() - t0, "final_heldout": final})
