"""Mixtral-style MoE transformer in PyTorch, mirroring moeflow's forward pass for
general.architecture = "llama" (src/engine/transformer.cpp, moe_layer.cpp and
tools/reference/moe_reference.py):

  x = tok_embd[ids]
  per layer:  x += Wo · attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n)     n = RMSNorm(x) * attn_norm
              x += Σ_top-k  w_e · Wd_e (silu(Wg_e·m) ⊙ Wu_e·m)   m = RMSNorm(x) * ffn_norm
  logits = output · (RMSNorm(x) * output_norm)

RoPE rotates adjacent pairs (x[2i], x[2i+1]) (GGUF "llama" layout, base 10000, all of
head_dim); GQA shares each k/v head among n_head / n_kv query heads; the router is a
softmax over all experts, then top-k, then the k weights renormalised to sum to 1.
Weights are stored exactly as GGUF wants them: a linear map {in, out} is an
[out][in] matrix, experts are stacked [E][out][in].
A dense baseline is the same model with one expert and top-1 (router weight 1).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, **kw):
        self.n_vocab = 4096
        self.n_ctx = 256
        self.n_embd = 256
        self.n_layer = 6
        self.n_head = 4
        self.n_head_kv = 2
        self.n_expert = 8
        self.n_expert_used = 2
        self.n_ff = 512          # per expert
        self.rms_eps = 1e-5
        self.rope_base = 10000.0
        self.__dict__.update(kw)

    @property
    def head_dim(self):
        return self.n_embd // self.n_head


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(cfg, n, device=None):
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()   # [n, d/2]


def apply_rope(x, cos, sin):
    """x: [B, H, T, d]; rotates adjacent pairs."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, hd, E, Fh = cfg.n_embd, cfg.head_dim, cfg.n_expert, cfg.n_ff
        self.cfg = cfg
        self.attn_norm = nn.Parameter(torch.ones(D))
        self.wq = nn.Parameter(torch.empty(cfg.n_head * hd, D))
        self.wk = nn.Parameter(torch.empty(cfg.n_head_kv * hd, D))
        self.wv = nn.Parameter(torch.empty(cfg.n_head_kv * hd, D))
        self.wo = nn.Parameter(torch.empty(D, cfg.n_head * hd))
        self.ffn_norm = nn.Parameter(torch.ones(D))
        self.router = nn.Parameter(torch.empty(E, D))
        self.w_gate = nn.Parameter(torch.empty(E, Fh, D))
        self.w_up = nn.Parameter(torch.empty(E, Fh, D))
        self.w_down = nn.Parameter(torch.empty(E, D, Fh))
        self.register_buffer("mask", torch.triu(torch.ones(cfg.n_ctx, cfg.n_ctx, dtype=torch.bool), 1), persistent=False)

    def attention(self, x, cos, sin):
        c = self.cfg
        B, T, D = x.shape
        hd = c.head_dim
        q = (x @ self.wq.T).view(B, T, c.n_head, hd).transpose(1, 2)
        k = (x @ self.wk.T).view(B, T, c.n_head_kv, hd).transpose(1, 2)
        v = (x @ self.wv.T).view(B, T, c.n_head_kv, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = c.n_head // c.n_head_kv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(-1)
        o = att @ v
        return o.transpose(1, 2).reshape(B, T, c.n_head * hd) @ self.wo.T

    def moe(self, x):
        """x: [N, D]. Returns (out [N, D], aux loss, expert counts [E])."""
        c = self.cfg
        N, D = x.shape
        E, K = c.n_expert, c.n_expert_used
        if E == 1:
            h = F.silu(x @ self.w_gate[0].T) * (x @ self.w_up[0].T)
            return h @ self.w_down[0].T, x.new_zeros(()), torch.tensor([N])
        probs = (x @ self.router.T).softmax(-1)                 # [N, E]
        w, ids = probs.topk(K, dim=-1)                          # [N, K]
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        flat_ids = ids.reshape(-1)
        flat_w = w.reshape(-1)
        tok = torch.arange(N).repeat_interleave(K)
        order = torch.argsort(flat_ids, stable=True)
        counts = torch.bincount(flat_ids, minlength=E)
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n == 0:
                continue
            sel = order[start:start + n]
            start += n
            t = tok[sel]
            xe = x[t]
            h = F.silu(xe @ self.w_gate[e].T) * (xe @ self.w_up[e].T)
            out.index_add_(0, t, (h @ self.w_down[e].T) * flat_w[sel, None])
        # Switch-Transformer load balancing: E * Σ_e f_e P_e, f_e = share of the N*K
        # assignments that went to e, P_e = mean router probability of e.
        f = counts.float() / (N * K)
        aux = E * (f * probs.mean(0)).sum()
        return out, aux, counts

    def forward(self, x, cos, sin):
        c = self.cfg
        x = x + self.attention(rms_norm(x, self.attn_norm, c.rms_eps), cos, sin)
        B, T, D = x.shape
        m, aux, counts = self.moe(rms_norm(x, self.ffn_norm, c.rms_eps).reshape(B * T, D))
        return x + m.view(B, T, D), aux, counts


class MoEModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Parameter(torch.empty(cfg.n_vocab, cfg.n_embd))
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layer))
        self.output_norm = nn.Parameter(torch.ones(cfg.n_embd))
        self.output = nn.Parameter(torch.empty(cfg.n_vocab, cfg.n_embd))
        cos, sin = rope_tables(cfg, cfg.n_ctx)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        out_std = std / math.sqrt(2 * self.cfg.n_layer)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    p.fill_(1.0)
                elif name.endswith(("wo", "w_down")):
                    p.normal_(0, out_std, generator=g)
                else:
                    p.normal_(0, std, generator=g)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.tok_embd[ids]
        cos, sin = self.cos[:T], self.sin[:T]
        aux_total, counts = 0.0, []
        for L in self.layers:
            x, aux, c = L(x, cos, sin)
            aux_total = aux_total + aux
            counts.append(c)
        x = rms_norm(x, self.output_norm, self.cfg.rms_eps)
        return x @ self.output.T, aux_total / len(self.layers), counts

    def param_counts(self):
        c = self.cfg
        total = sum(p.numel() for p in self.parameters())
        expert = sum(L.w_gate.numel() + L.w_up.numel() + L.w_down.numel() for L in self.layers)
        active = total - expert + expert * c.n_expert_used // c.n_expert
        return total, active
