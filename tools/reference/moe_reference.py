"""PyTorch reference forward pass of Mixtral, Qwen3-MoE and OLMoE, in float64.

Written from the models' definitions (Hugging Face MixtralForCausalLM,
Qwen3MoeForCausalLM, OlmoeForCausalLM), mapped to the GGUF conventions llama.cpp
uses: weights {in, out} are [out][in] matrices; for `llama` (Mixtral) llama.cpp's
converter permutes q/k rows so that RoPE rotates adjacent pairs (x[2i], x[2i+1]);
qwen3moe and olmoe keep Hugging Face's rotate_half (pairs (i, i + d/2)).
No KV cache: each call recomputes the whole sequence, which is slow but obviously
right.
"""
import torch

from gguf_reader import GGUF


class Config:
    def __init__(self, g):
        md = g.metadata
        self.arch = md["general.architecture"]
        p = self.arch + "."
        self.n_embd = md[p + "embedding_length"]
        self.n_layer = md[p + "block_count"]
        self.n_head = md[p + "attention.head_count"]
        self.n_kv = md.get(p + "attention.head_count_kv", self.n_head)
        self.head_dim = md.get(p + "attention.key_length", self.n_embd // self.n_head)
        self.rot_dim = md.get(p + "rope.dimension_count", self.head_dim)
        self.eps = md.get(p + "attention.layer_norm_rms_epsilon", 1e-5)
        self.base = md.get(p + "rope.freq_base", 10000.0)
        self.n_expert = md[p + "expert_count"]
        self.top_k = md[p + "expert_used_count"]
        if self.arch not in ("llama", "qwen3moe", "olmoe"):
            raise ValueError(f"unsupported architecture {self.arch}")
        self.neox = self.arch in ("qwen3moe", "olmoe")
        self.renormalize = self.arch in ("llama", "qwen3moe")  # OLMoE: norm_topk_prob = False


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotary(x, positions, cfg):
    """x: [seq, heads, head_dim]."""
    d = cfg.rot_dim
    inv_freq = 1.0 / (cfg.base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = positions[:, None].double() * inv_freq[None, :]  # [seq, d/2]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    rot, rest = x[..., :d], x[..., d:]
    if cfg.neox:
        a, b = rot[..., : d // 2], rot[..., d // 2:]
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([out, rest], dim=-1)


class Reference:
    def __init__(self, path):
        g = GGUF(path)
        self.cfg = Config(g)
        t = lambda n: torch.from_numpy(g.tensor(n).copy()).double()
        self.embd = t("token_embd.weight")
        self.out_norm = t("output_norm.weight")
        self.out = t("output.weight") if "output.weight" in g.tensors else self.embd
        self.layers = []
        for i in range(self.cfg.n_layer):
            b = f"blk.{i}."
            L = {k: t(b + k + ".weight") for k in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                  "ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps",
                                                  "ffn_down_exps")}
            if self.cfg.arch in ("qwen3moe", "olmoe"):
                L["attn_q_norm"] = t(b + "attn_q_norm.weight")
                L["attn_k_norm"] = t(b + "attn_k_norm.weight")
            self.layers.append(L)

    def attention(self, L, x, positions):
        c = self.cfg
        S = x.shape[0]
        q, k, v = x @ L["attn_q"].T, x @ L["attn_k"].T, x @ L["attn_v"].T
        if c.arch == "olmoe":  # RMSNorm over the whole projection, before the head split
            q, k = rms_norm(q, L["attn_q_norm"], c.eps), rms_norm(k, L["attn_k_norm"], c.eps)
        q = q.view(S, c.n_head, c.head_dim)
        k = k.view(S, c.n_kv, c.head_dim)
        v = v.view(S, c.n_kv, c.head_dim)
        if c.arch == "qwen3moe":  # RMSNorm per head
            q, k = rms_norm(q, L["attn_q_norm"], c.eps), rms_norm(k, L["attn_k_norm"], c.eps)
        q, k = rotary(q, positions, c), rotary(k, positions, c)
        rep = c.n_head // c.n_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / (c.head_dim ** 0.5)
        mask = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf")).softmax(-1)
        o = torch.einsum("hqk,khd->qhd", scores, v).reshape(S, c.n_head * c.head_dim)
        return o @ L["attn_output"].T

    def moe(self, L, x):
        c = self.cfg
        probs = (x @ L["ffn_gate_inp"].T).softmax(-1)
        w, ids = probs.topk(c.top_k, dim=-1)
        if c.renormalize:
            w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for s in range(x.shape[0]):
            for j in range(c.top_k):
                e = int(ids[s, j])
                h = torch.nn.functional.silu(L["ffn_gate_exps"][e] @ x[s]) * (L["ffn_up_exps"][e] @ x[s])
                out[s] += w[s, j] * (L["ffn_down_exps"][e] @ h)
        return out

    @torch.no_grad()
    def logits(self, tokens):
        c = self.cfg
        x = self.embd[torch.tensor(tokens)]
        pos = torch.arange(len(tokens))
        for L in self.layers:
            x = x + self.attention(L, rms_norm(x, L["attn_norm"], c.eps), pos)
            x = x + self.moe(L, rms_norm(x, L["ffn_norm"], c.eps))
        return rms_norm(x, self.out_norm, c.eps) @ self.out.T
