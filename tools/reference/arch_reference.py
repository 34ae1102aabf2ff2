"""NumPy reference forward pass, in float64, of the architectures added after the
PyTorch one (moe_reference.py): Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B).

Written from the Hugging Face definition (Qwen2MoeForCausalLM), mapped to the GGUF
conventions llama.cpp's converter uses: weights {in, out} are [out][in] matrices,
q/k rows unpermuted (RoPE rotates the pairs (i, i + d/2), rotate_half). No KV cache:
each call recomputes the whole sequence, which is slow but obviously right. Needs
NumPy only.
"""
import numpy as np

from gguf_reader import GGUF

ARCHS = ("qwen2moe",)


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def rotary_neox(x, positions, rot_dim, base):
    """x: [seq, heads, head_dim]; rotate_half on the first rot_dim dims."""
    d = rot_dim
    inv_freq = 1.0 / (base ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = positions[:, None].astype(np.float64) * inv_freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., : d // 2], x[..., d // 2: d]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos, x[..., d:]], axis=-1)


class Config:
    def __init__(self, g):
        md = g.metadata
        self.arch = md["general.architecture"]
        if self.arch not in ARCHS:
            raise ValueError(f"unsupported architecture {self.arch}")
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
        # Qwen2MoeSparseMoeBlock: norm_topk_prob is false for the released models.
        self.renormalize = False


class Reference:
    def __init__(self, path):
        g = GGUF(path)
        self.cfg = Config(g)
        t = lambda n: g.tensor(n).astype(np.float64)
        self.embd = t("token_embd.weight")
        self.out_norm = t("output_norm.weight")
        self.out = t("output.weight") if "output.weight" in g.tensors else self.embd
        self.layers = []
        for i in range(self.cfg.n_layer):
            b = f"blk.{i}."
            names = ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                     "attn_q.bias", "attn_k.bias", "attn_v.bias", "ffn_norm.weight", "ffn_gate_inp.weight",
                     "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                     "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
                     "ffn_down_shexp.weight"]
            self.layers.append({n: t(b + n) for n in names})

    def attention(self, L, x, positions):
        c = self.cfg
        S = x.shape[0]
        # Qwen2MoeAttention: q_proj, k_proj and v_proj have biases, o_proj none.
        q = x @ L["attn_q.weight"].T + L["attn_q.bias"]
        k = x @ L["attn_k.weight"].T + L["attn_k.bias"]
        v = x @ L["attn_v.weight"].T + L["attn_v.bias"]
        q = rotary_neox(q.reshape(S, c.n_head, c.head_dim), positions, c.rot_dim, c.base)
        k = rotary_neox(k.reshape(S, c.n_kv, c.head_dim), positions, c.rot_dim, c.base)
        v = v.reshape(S, c.n_kv, c.head_dim)
        rep = c.n_head // c.n_kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(c.head_dim)
        mask = np.triu(np.ones((S, S), dtype=bool), k=1)
        scores = softmax(np.where(mask[None], -np.inf, scores))
        o = np.einsum("hqk,khd->qhd", scores, v).reshape(S, c.n_head * c.head_dim)
        return o @ L["attn_output.weight"].T

    def moe(self, L, x):
        c = self.cfg
        probs = softmax(x @ L["ffn_gate_inp.weight"].T)
        out = np.zeros_like(x)
        for s in range(x.shape[0]):
            # top-k, ties to the lower expert id (a stable sort of -p)
            ids = np.argsort(-probs[s], kind="stable")[: c.top_k]
            w = probs[s, ids]
            if c.renormalize:
                w = w / w.sum()
            for j, e in enumerate(ids):
                h = silu(L["ffn_gate_exps.weight"][e] @ x[s]) * (L["ffn_up_exps.weight"][e] @ x[s])
                out[s] += w[j] * (L["ffn_down_exps.weight"][e] @ h)
        # The shared expert, scaled by sigmoid(shared_expert_gate(x)) (a Linear(D, 1)).
        h = silu(x @ L["ffn_gate_shexp.weight"].T) * (x @ L["ffn_up_shexp.weight"].T)
        gate = sigmoid(x @ L["ffn_gate_inp_shexp.weight"].reshape(-1))[:, None]
        return out + gate * (h @ L["ffn_down_shexp.weight"].T)

    def logits(self, tokens):
        c = self.cfg
        x = self.embd[np.asarray(tokens)]
        pos = np.arange(len(tokens))
        for L in self.layers:
            x = x + self.attention(L, rms_norm(x, L["attn_norm.weight"], c.eps), pos)
            x = x + self.moe(L, rms_norm(x, L["ffn_norm.weight"], c.eps))
        return rms_norm(x, self.out_norm, c.eps) @ self.out.T
