"""NumPy reference forward pass, in float64, of the architectures added after the
PyTorch one (moe_reference.py): Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B) and
gpt-oss (gpt-oss-20b, gpt-oss-120b), DeepSeek-V2 (DeepSeek-V2, V2-Lite, and V3's router:
DeepSeek2Reference below), GLM-4.5 (Glm4MoeReference), Granite-MoE (GraniteMoeReference),
ERNIE-4.5-MoE (Ernie45MoeReference) and Hunyuan-A13B (HunyuanMoeReference).

Written from the Hugging Face definitions (Qwen2MoeForCausalLM, GptOssForCausalLM),
mapped to the GGUF conventions llama.cpp's converter uses: weights {in, out} are [out][in] matrices,
q/k rows unpermuted (RoPE rotates the pairs (i, i + d/2), rotate_half). No KV cache:
each call recomputes the whole sequence, which is slow but obviously right. Needs
NumPy only.
"""
import math

import numpy as np

from gguf_reader import GGUF

ARCHS = ("qwen2moe", "deepseek2", "gpt-oss", "glm4moe", "granitemoe", "ernie4_5-moe", "hunyuan-moe")


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


def gguf_layers(g, n_layer):
    """Each block's tensors as float64, keyed by their name after "blk.N."."""
    layers = []
    for i in range(n_layer):
        b = f"blk.{i}."
        layers.append({n[len(b):]: g.tensor(n).astype(np.float64) for n in g.tensors if n.startswith(b)})
    return layers


def causal_gqa(q, k, v, scale):
    """Causal softmax attention of q [S, H, d] over k, v [S, H_kv, d] (each kv head shared
    by H / H_kv query heads), scores times `scale`; returns [S, H * d_v]."""
    S, H = q.shape[0], q.shape[1]
    rep = H // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) * scale
    mask = np.triu(np.ones((S, S), dtype=bool), k=1)
    scores = softmax(np.where(mask[None], -np.inf, scores))
    return np.einsum("hqk,khd->qhd", scores, v).reshape(S, H * v.shape[2])


def swiglu_mlp(x, gate, up, down):
    """A SwiGLU FFN: down(silu(gate x) * up x), x one row or many."""
    return (silu(x @ gate.T) * (x @ up.T)) @ down.T


def renormalised_experts(L, x, probs, top_k, rank_bias=None):
    """The routed experts' sum: each token's top_k experts by probs (plus rank_bias, which
    chooses but does not weigh; ties to the lower id), weighted by their probabilities
    divided by their sum."""
    out = np.zeros_like(x)
    rank = probs if rank_bias is None else probs + rank_bias
    for s in range(x.shape[0]):
        ids = np.argsort(-rank[s], kind="stable")[:top_k]
        w = probs[s, ids] / probs[s, ids].sum()
        for j, e in enumerate(ids):
            out[s] += w[j] * swiglu_mlp(x[s], L["ffn_gate_exps.weight"][e], L["ffn_up_exps.weight"][e],
                                        L["ffn_down_exps.weight"][e])
    return out


class LlamaShapedReference:
    """What the references of Llama-shaped files read alike (GraniteMoe, Ernie45Moe,
    HunyuanMoe below): sizes, RoPE base, epsilon, top-k, the embeddings (tied output when
    the file has no output.weight) and every block's tensors."""

    def __init__(self, path, arch):
        g = GGUF(path)
        md = g.metadata
        p = arch + "."
        t = lambda n: g.tensor(n).astype(np.float64)
        self.md, self.p = md, p
        self.n_layer = md[p + "block_count"]
        self.n_head = md[p + "attention.head_count"]
        self.n_kv = md[p + "attention.head_count_kv"]
        self.head_dim = md.get(p + "attention.key_length", md[p + "embedding_length"] // self.n_head)
        self.base = md.get(p + "rope.freq_base", 10000.0)
        self.eps = md.get(p + "attention.layer_norm_rms_epsilon", 1e-5)
        self.top_k = md[p + "expert_used_count"]
        self.embd = t("token_embd.weight")
        self.out_norm = t("output_norm.weight")
        self.out = t("output.weight") if "output.weight" in g.tensors else self.embd
        self.layers = gguf_layers(g, self.n_layer)

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


# --- DeepSeek-V2 -----------------------------------------------------------------

class MoeRouting:
    """The routing keys of DeepSeek's MoE block (deepseek2, glm4moe) as llama.cpp's
    converter writes them: top-k, expert_weights_scale (HF's routed_scaling_factor),
    expert_weights_norm (norm_topk_prob), the expert groups, the gating function (1
    softmax, 2 sigmoid; absent or 0: the architecture's default)."""

    def __init__(self, md, p, default_gating):
        self.n_expert = md[p + "expert_count"]
        self.top_k = md[p + "expert_used_count"]
        self.scale = md.get(p + "expert_weights_scale", 1.0)
        self.norm = bool(md.get(p + "expert_weights_norm", False))
        self.n_group = md.get(p + "expert_group_count", 1)
        self.topk_group = md.get(p + "expert_group_used_count", self.n_group)
        self.sigmoid = (md.get(p + "expert_gating_func", 0) or default_gating) == 2

    def route_v3(self, logits, bias):
        """DeepseekV3 MoEGate / Glm4MoeTopkRouter (noaux_tc): sigmoid scores; experts chosen
        by score plus bias among the topk_group groups whose two best are best; weights the
        chosen unbiased scores, renormalised when norm, times scale. The masked groups'
        experts at -inf rather than HF's 0 (they differ only when fewer than top-k biased
        scores of the chosen groups are positive; the engine masks with -inf)."""
        scores = 1.0 / (1.0 + np.exp(-logits))
        if bias is None:
            bias = np.zeros(self.n_expert)
        idx, w = [], []
        for s in range(scores.shape[0]):
            choice = scores[s] + bias
            if self.n_group > 1:
                per_group = choice.reshape(self.n_group, -1)
                group_scores = -np.sort(-per_group, axis=-1)[:, :2].sum(-1)
                groups = np.argsort(-group_scores, kind="stable")[: self.topk_group]
                keep = np.zeros(self.n_group, dtype=bool)
                keep[groups] = True
                choice = np.where(np.repeat(keep, self.n_expert // self.n_group), choice, -np.inf)
            ids = np.argsort(-choice, kind="stable")[: self.top_k]  # ties to the lower id
            wt = scores[s][ids]
            if self.top_k > 1 and self.norm:
                wt = wt / (wt.sum() + 1e-20)
            idx.append(ids)
            w.append(wt * self.scale)
        return idx, w


def yarn_inv_freq(dim, base, factor, orig_ctx, beta_fast=32.0, beta_slow=1.0):
    """DeepseekV2YarnRotaryEmbedding's inverse frequencies (dim = the rope dims)."""
    freq_extra = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if factor <= 1.0:
        return freq_extra
    freq_inter = freq_extra / factor

    def correction_dim(n_rot):
        return (dim * math.log(orig_ctx / (n_rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extra_mask = 1.0 - ramp
    return freq_inter * (1.0 - extra_mask) + freq_extra * extra_mask


def yarn_get_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rotary_deepseek(x, positions, inv_freq):
    """DeepSeek-V2's apply_rotary_pos_emb on x [seq, heads, d]: de-interleave the pairs
    (2i, 2i+1) into halves, then rotate_half with emb = cat(freqs, freqs)."""
    S, Hh, d = x.shape
    x = x.reshape(S, Hh, d // 2, 2).transpose(0, 1, 3, 2).reshape(S, Hh, d)
    freqs = positions[:, None].astype(np.float64) * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    rot = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
    return x * cos + rot * sin


class DeepSeek2Config:
    """The HF config (DeepseekV2Config) read back from the keys llama.cpp's converter writes."""

    def __init__(self, g):
        md = g.metadata
        p = "deepseek2."
        self.n_embd = md[p + "embedding_length"]
        self.n_layer = md[p + "block_count"] - md.get(p + "nextn_predict_layers", 0)  # MTP blocks are not run
        self.n_head = md[p + "attention.head_count"]
        # The split form (attn_k_b / attn_v_b) keeps the per-head sizes under *_mla.
        self.split_kv_b = p + "attention.key_length_mla" in md
        self.q_head_dim = md[p + ("attention.key_length_mla" if self.split_kv_b else "attention.key_length")]
        self.rope_dim = md[p + "rope.dimension_count"]              # qk_rope_head_dim
        self.nope_dim = self.q_head_dim - self.rope_dim             # qk_nope_head_dim
        self.v_head_dim = md[p + ("attention.value_length_mla" if self.split_kv_b else "attention.value_length")]
        self.q_lora_rank = md.get(p + "attention.q_lora_rank", 0) or None
        self.kv_lora_rank = md[p + "attention.kv_lora_rank"]
        self.first_k_dense_replace = md.get(p + "leading_dense_block_count", 0)
        self.n_shared_experts = md.get(p + "expert_shared_count", 0)
        # expert_gating_func 2: DeepSeek-V3's MoEGate (scoring_func "sigmoid", topk_method
        # "noaux_tc", e_score_correction_bias as exp_probs_b.bias); 1: V2's softmax gate.
        self.routing = r = MoeRouting(md, p, 1)
        if r.sigmoid:
            self.topk_method = "noaux_tc"
        else:
            self.topk_method = "group_limited_greedy" if r.n_group > 1 else "greedy"
        self.eps = md.get(p + "attention.layer_norm_rms_epsilon", 1e-6)
        self.base = md.get(p + "rope.freq_base", 10000.0)
        self.factor = 1.0
        if md.get(p + "rope.scaling.type") == "yarn":
            self.factor = md[p + "rope.scaling.factor"]
            self.orig_ctx = md[p + "rope.scaling.original_context_length"]
            # the converter writes 0.1 * mscale_all_dim; HF's mscale is taken equal to it
            self.mscale_all_dim = md.get(p + "rope.scaling.yarn_log_multiplier", 0.0) / 0.1
            self.mscale = self.mscale_all_dim


class DeepSeek2Reference:
    """DeepseekV2ForCausalLM (modeling_deepseek.py) on a GGUF file (attn_kv_b, or the
    split attn_k_b / attn_v_b); no KV cache, every call recomputes the sequence."""

    def __init__(self, path):
        g = GGUF(path)
        c = self.cfg = DeepSeek2Config(g)
        t = lambda n: g.tensor(n).astype(np.float64)
        self.embd = t("token_embd.weight")
        self.out_norm = t("output_norm.weight")
        self.out = t("output.weight") if "output.weight" in g.tensors else self.embd
        self.layers = []
        for i in range(c.n_layer):
            b = f"blk.{i}."
            L = {n[len(b):]: t(n) for n in g.tensors if n.startswith(b)}
            if c.split_kv_b:  # kv_b_proj back from k_b [H][R][nope] (transposed) and v_b [H][v][R]
                kv_b = np.concatenate([L["attn_k_b.weight"].transpose(0, 2, 1), L["attn_v_b.weight"]], axis=1)
                L["attn_kv_b.weight"] = kv_b.reshape(c.n_head * (c.nope_dim + c.v_head_dim), c.kv_lora_rank)
            self.layers.append(L)
        if c.factor > 1.0:
            self.inv_freq = yarn_inv_freq(c.rope_dim, c.base, c.factor, c.orig_ctx)
            self.cs_mscale = yarn_get_mscale(c.factor, c.mscale) / yarn_get_mscale(c.factor, c.mscale_all_dim)
            m = yarn_get_mscale(c.factor, c.mscale_all_dim) if c.mscale_all_dim else 1.0
        else:
            self.inv_freq = yarn_inv_freq(c.rope_dim, c.base, 1.0, 0)
            self.cs_mscale, m = 1.0, 1.0
        self.softmax_scale = c.q_head_dim ** -0.5 * m * m

    def attention(self, L, x, positions):
        c = self.cfg
        S, H = x.shape[0], c.n_head
        if c.q_lora_rank is None:
            q = x @ L["attn_q.weight"].T
        else:
            q = rms_norm(x @ L["attn_q_a.weight"].T, L["attn_q_a_norm.weight"], c.eps) @ L["attn_q_b.weight"].T
        q = q.reshape(S, H, c.q_head_dim)
        q_nope, q_pe = q[..., : c.nope_dim], q[..., c.nope_dim:]
        ckv = x @ L["attn_kv_a_mqa.weight"].T
        ckv, k_pe = ckv[:, : c.kv_lora_rank], ckv[:, c.kv_lora_rank:].reshape(S, 1, c.rope_dim)
        kv = (rms_norm(ckv, L["attn_kv_a_norm.weight"], c.eps) @ L["attn_kv_b.weight"].T)
        kv = kv.reshape(S, H, c.nope_dim + c.v_head_dim)
        k_nope, v = kv[..., : c.nope_dim], kv[..., c.nope_dim:]
        q_pe = rotary_deepseek(q_pe, positions, self.inv_freq)
        k_pe = rotary_deepseek(k_pe, positions, self.inv_freq)
        if self.cs_mscale != 1.0:  # cos and sin both carry _mscale in HF
            q_pe, k_pe = q_pe * self.cs_mscale, k_pe * self.cs_mscale
        qs = np.concatenate([q_nope, q_pe], axis=-1)
        ks = np.concatenate([k_nope, np.broadcast_to(k_pe, (S, H, c.rope_dim))], axis=-1)
        scores = np.einsum("qhd,khd->hqk", qs, ks) * self.softmax_scale
        mask = np.triu(np.ones((S, S), dtype=bool), k=1)
        scores = softmax(np.where(mask[None], -np.inf, scores))
        o = np.einsum("hqk,khd->qhd", scores, v).reshape(S, H * c.v_head_dim)
        return o @ L["attn_output.weight"].T

    def gate(self, L, x):
        """MoEGate: V2's softmax scores, greedy or group-limited top-k; or V3's sigmoid
        scores, chosen by score plus bias among the groups whose two best are best."""
        c = self.cfg
        logits = x @ L["ffn_gate_inp.weight"].T
        r = c.routing
        if r.sigmoid:
            return r.route_v3(logits, L.get("exp_probs_b.bias"))
        scores = softmax(logits)
        idx, w = [], []
        for s in range(x.shape[0]):
            sc = scores[s]
            if c.topk_method == "group_limited_greedy":
                group_scores = sc.reshape(r.n_group, -1).max(-1)
                groups = np.argsort(-group_scores, kind="stable")[: r.topk_group]
                keep = np.zeros(r.n_group, dtype=bool)
                keep[groups] = True
                sc = np.where(np.repeat(keep, r.n_expert // r.n_group), sc, 0.0)
            ids = np.argsort(-sc, kind="stable")[: r.top_k]  # ties to the lower id
            wt = sc[ids]
            if r.top_k > 1 and r.norm:
                wt = wt / (wt.sum() + 1e-20)
            else:
                wt = wt * r.scale
            idx.append(ids)
            w.append(wt)
        return idx, w

    def moe(self, L, x):
        c = self.cfg
        idx, w = self.gate(L, x)
        out = np.zeros_like(x)
        for s in range(x.shape[0]):
            for j, e in enumerate(idx[s]):
                out[s] += w[s][j] * swiglu_mlp(x[s], L["ffn_gate_exps.weight"][e], L["ffn_up_exps.weight"][e],
                                               L["ffn_down_exps.weight"][e])
        if c.n_shared_experts:
            out = out + swiglu_mlp(x, L["ffn_gate_shexp.weight"], L["ffn_up_shexp.weight"], L["ffn_down_shexp.weight"])
        return out

    def logits(self, tokens):
        c = self.cfg
        x = self.embd[np.asarray(tokens)]
        pos = np.arange(len(tokens))
        for i, L in enumerate(self.layers):
            x = x + self.attention(L, rms_norm(x, L["attn_norm.weight"], c.eps), pos)
            h = rms_norm(x, L["ffn_norm.weight"], c.eps)
            if i < c.first_k_dense_replace:
                x = x + swiglu_mlp(h, L["ffn_gate.weight"], L["ffn_up.weight"], L["ffn_down.weight"])
            else:
                x = x + self.moe(L, h)
        return rms_norm(x, self.out_norm, c.eps) @ self.out.T


# --- gpt-oss ---------------------------------------------------------------------

def hf_yarn_inv_freq(base, dim, factor, orig_ctx, beta_fast, beta_slow, truncate):
    """_compute_yarn_parameters of HF's modeling_rope_utils; gpt-oss's config sets
    truncate = False: the ramp's ends stay fractional."""
    def correction_dim(rotations):
        return dim * np.log(orig_ctx / (rotations * 2 * np.pi)) / (2 * np.log(base))
    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = np.floor(low), np.ceil(high)
    low = max(low, 0.0)
    high = min(high, dim - 1.0)
    if low == high:
        high += 0.001
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation_factor = 1.0 - ramp
    return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor


class GptOssReference:
    """GptOssForCausalLM: attention with q/k/v/o biases, a learned sink logit per head
    in every softmax, sliding-window attention on the even layers (layer_types), YaRN
    RoPE (rotate_half pairs); a router with a bias whose top-k logits are softmaxed; experts
    with biases and the clamped SwiGLU (alpha 1.702, limit 7). llama.cpp's converter names
    post_attention_layernorm post_attention_norm and sinks attn_sinks.weight."""

    ALPHA, LIMIT = 1.702, 7.0

    def __init__(self, path):
        g = GGUF(path)
        md = g.metadata
        p = "gpt-oss."
        self.n_layer = md[p + "block_count"]
        self.n_head = md[p + "attention.head_count"]
        self.n_kv = md[p + "attention.head_count_kv"]
        self.head_dim = md[p + "attention.key_length"]
        self.eps = md[p + "attention.layer_norm_rms_epsilon"]
        self.top_k = md[p + "expert_used_count"]
        self.window = md[p + "attention.sliding_window"]
        base = md[p + "rope.freq_base"]
        self.inv_freq = 1.0 / (base ** (np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim))
        self.attention_scaling = 1.0
        if md.get(p + "rope.scaling.type") == "yarn":
            factor = md[p + "rope.scaling.factor"]
            self.inv_freq = hf_yarn_inv_freq(base, self.head_dim, factor,
                                             md[p + "rope.scaling.original_context_length"],
                                             md.get(p + "rope.scaling.yarn_beta_fast", 32.0),
                                             md.get(p + "rope.scaling.yarn_beta_slow", 1.0), truncate=False)
            self.attention_scaling = 0.1 * np.log(factor) + 1.0 if factor > 1 else 1.0
        t = lambda n: g.tensor(n).astype(np.float64)
        self.embd = t("token_embd.weight")
        self.out_norm = t("output_norm.weight")
        self.out = t("output.weight")
        self.layers = []
        for i in range(self.n_layer):
            b = f"blk.{i}."
            names = ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                     "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "attn_sinks.weight",
                     "post_attention_norm.weight", "ffn_gate_inp.weight", "ffn_gate_inp.bias",
                     "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                     "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"]
            self.layers.append({n: t(b + n) for n in names})

    def rotary(self, x, positions):
        """GptOssRotaryEmbedding + _apply_rotary_emb: halves (first, second) rotated by
        cos and sin that carry the attention scaling."""
        ang = positions[:, None].astype(np.float64) * self.inv_freq[None, :]
        cos = (np.cos(ang) * self.attention_scaling)[:, None, :]
        sin = (np.sin(ang) * self.attention_scaling)[:, None, :]
        half = self.head_dim // 2
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    def attention(self, L, x, positions, sliding):
        S, H, hd = x.shape[0], self.n_head, self.head_dim
        q = x @ L["attn_q.weight"].T + L["attn_q.bias"]
        k = x @ L["attn_k.weight"].T + L["attn_k.bias"]
        v = x @ L["attn_v.weight"].T + L["attn_v.bias"]
        q = self.rotary(q.reshape(S, H, hd), positions)
        k = self.rotary(k.reshape(S, self.n_kv, hd), positions)
        v = v.reshape(S, self.n_kv, hd)
        rep = H // self.n_kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) * hd ** -0.5
        i, j = np.arange(S)[:, None], np.arange(S)[None, :]
        allowed = j <= i
        if sliding:  # the sliding-window causal mask: the last `window` positions
            allowed &= i - j < self.window
        scores = np.where(allowed[None], scores, -np.inf)
        # eager_attention_forward: the sink joins as one more logit, its share dropped.
        sinks = np.broadcast_to(L["attn_sinks.weight"][:, None, None], (H, S, 1))
        combined = np.concatenate([scores, sinks], axis=-1)
        probs = softmax(combined)[..., :-1]
        o = np.einsum("hqk,khd->qhd", probs, v).reshape(S, H * hd)
        return o @ L["attn_output.weight"].T + L["attn_output.bias"]

    def moe(self, L, x):
        logits = x @ L["ffn_gate_inp.weight"].T + L["ffn_gate_inp.bias"]
        out = np.zeros_like(x)
        for s in range(x.shape[0]):
            ids = np.argsort(-logits[s], kind="stable")[: self.top_k]  # top-k, ties to the lower id
            w = softmax(logits[s, ids])
            for j, e in enumerate(ids):
                gate = L["ffn_gate_exps.weight"][e] @ x[s] + L["ffn_gate_exps.bias"][e]
                up = L["ffn_up_exps.weight"][e] @ x[s] + L["ffn_up_exps.bias"][e]
                gate = np.minimum(gate, self.LIMIT)
                up = np.clip(up, -self.LIMIT, self.LIMIT)
                h = (up + 1) * (gate * sigmoid(gate * self.ALPHA))
                out[s] += w[j] * (L["ffn_down_exps.weight"][e] @ h + L["ffn_down_exps.bias"][e])
        return out

    def logits(self, tokens):
        x = self.embd[np.asarray(tokens)]
        pos = np.arange(len(tokens))
        for i, L in enumerate(self.layers):
            x = x + self.attention(L, rms_norm(x, L["attn_norm.weight"], self.eps), pos, sliding=i % 2 == 0)
            x = x + self.moe(L, rms_norm(x, L["post_attention_norm.weight"], self.eps))
        return rms_norm(x, self.out_norm, self.eps) @ self.out.T


# --- GLM-4.5 ---------------------------------------------------------------------

class Glm4MoeReference:
    """Glm4MoeForCausalLM (transformers' modeling_glm4_moe.py) on a GGUF file: q/k/v with
    biases, per-head q/k RMSNorm when the file has them (use_qk_norm), RoPE by rotate_half
    on the first rope.dimension_count dims of each head (partial_rotary_factor), GQA;
    post_attention_layernorm before the FFN; the first leading_dense_block_count layers
    a dense SwiGLU, the others DeepSeek-V3's routed experts plus the shared ones."""

    def __init__(self, path):
        g = GGUF(path)
        md = g.metadata
        p = "glm4moe."
        t = lambda n: g.tensor(n).astype(np.float64)
        self.n_layer = md[p + "block_count"] - md.get(p + "nextn_predict_layers", 0)
        self.n_head = md[p + "attention.head_count"]
        self.n_kv = md[p + "attention.head_count_kv"]
        self.head_dim = md[p + "attention.key_length"]
        self.rot_dim = md[p + "rope.dimension_count"]
        self.base = md.get(p + "rope.freq_base", 10000.0)
        self.eps = md.get(p + "attention.layer_norm_rms_epsilon", 1e-5)
        self.dense_lead = md.get(p + "leading_dense_block_count", 0)
        self.routing = MoeRouting(md, p, 2)
        assert self.routing.sigmoid, "GLM-4.5's router is sigmoid"
        self.embd = t("token_embd.weight")
        self.out_norm = t("output_norm.weight")
        self.out = t("output.weight") if "output.weight" in g.tensors else self.embd
        self.layers = gguf_layers(g, self.n_layer)

    def attention(self, L, x, positions):
        S, H, hd = x.shape[0], self.n_head, self.head_dim
        q = (x @ L["attn_q.weight"].T + L["attn_q.bias"]).reshape(S, H, hd)
        k = (x @ L["attn_k.weight"].T + L["attn_k.bias"]).reshape(S, self.n_kv, hd)
        v = (x @ L["attn_v.weight"].T + L["attn_v.bias"]).reshape(S, self.n_kv, hd)
        if "attn_q_norm.weight" in L:
            q = rms_norm(q, L["attn_q_norm.weight"], self.eps)
            k = rms_norm(k, L["attn_k_norm.weight"], self.eps)
        q = rotary_neox(q, positions, self.rot_dim, self.base)
        k = rotary_neox(k, positions, self.rot_dim, self.base)
        o = causal_gqa(q, k, v, 1.0 / np.sqrt(hd))
        return o @ L["attn_output.weight"].T

    def ffn(self, i, L, x):
        if i < self.dense_lead:
            return swiglu_mlp(x, L["ffn_gate.weight"], L["ffn_up.weight"], L["ffn_down.weight"])
        idx, w = self.routing.route_v3(x @ L["ffn_gate_inp.weight"].T, L.get("exp_probs_b.bias"))
        out = np.zeros_like(x)
        for s in range(x.shape[0]):
            for j, e in enumerate(idx[s]):
                out[s] += w[s][j] * swiglu_mlp(x[s], L["ffn_gate_exps.weight"][e], L["ffn_up_exps.weight"][e],
                                               L["ffn_down_exps.weight"][e])
        if "ffn_gate_shexp.weight" in L:
            out = out + swiglu_mlp(x, L["ffn_gate_shexp.weight"], L["ffn_up_shexp.weight"], L["ffn_down_shexp.weight"])
        return out

    def logits(self, tokens):
        x = self.embd[np.asarray(tokens)]
        pos = np.arange(len(tokens))
        for i, L in enumerate(self.layers):
            x = x + self.attention(L, rms_norm(x, L["attn_norm.weight"], self.eps), pos)
            x = x + self.ffn(i, L, rms_norm(x, L["post_attention_norm.weight"], self.eps))
        return rms_norm(x, self.out_norm, self.eps) @ self.out.T


def rotary_pairs(x, positions, base):
    """x: [seq, heads, head_dim]; RoPE on adjacent pairs (x[2i], x[2i+1]): HF's rotate_half
    on the rows as Llama's checkpoint holds them, which the converter permuted so that
    each half-split pair (i, i + d/2) became adjacent."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = positions[:, None].astype(np.float64) * inv_freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


class GraniteMoeReference(LlamaShapedReference):
    """GraniteMoeForCausalLM / GraniteMoeSharedForCausalLM (transformers'
    modeling_granitemoe.py, modeling_granitemoeshared.py) on a GGUF file: Llama's
    attention with its score scale set by attention_multiplier, the inputs' embeddings
    times embedding_multiplier, every block's attention and MoE output times
    residual_multiplier before it joins the residual, the logits divided by
    logits_scaling; the router a softmax over the top-k logits (GraniteMoeTopKGating),
    each expert SwiGLU (input_linear's halves as gate and up), the shared MLP (when the
    file has one) added to the routed experts' sum."""

    def __init__(self, path):
        super().__init__(path, "granitemoe")
        md, p = self.md, self.p
        # As llama.cpp reads them: absent or 0 means no multiplier (1/sqrt(head_dim) for
        # the attention's); the logit scale is required.
        self.embedding_multiplier = md.get(p + "embedding_scale", 0) or 1.0
        self.residual_multiplier = md.get(p + "residual_scale", 0) or 1.0
        self.attention_multiplier = md.get(p + "attention.scale", 0) or 1.0 / math.sqrt(self.head_dim)
        self.logits_scaling = md[p + "logit_scale"]

    def attention(self, L, x, positions):
        S, H, hd = x.shape[0], self.n_head, self.head_dim
        q = rotary_pairs((x @ L["attn_q.weight"].T).reshape(S, H, hd), positions, self.base)
        k = rotary_pairs((x @ L["attn_k.weight"].T).reshape(S, self.n_kv, hd), positions, self.base)
        v = (x @ L["attn_v.weight"].T).reshape(S, self.n_kv, hd)
        o = causal_gqa(q, k, v, self.attention_multiplier)
        return o @ L["attn_output.weight"].T + L.get("attn_output.bias", 0.0)

    def moe(self, L, x):
        logits = x @ L["ffn_gate_inp.weight"].T
        out = np.zeros_like(x)
        for s in range(x.shape[0]):
            ids = np.argsort(-logits[s], kind="stable")[: self.top_k]  # ties to the lower id
            w = softmax(logits[s, ids])
            for j, e in enumerate(ids):
                out[s] += w[j] * swiglu_mlp(x[s], L["ffn_gate_exps.weight"][e], L["ffn_up_exps.weight"][e],
                                            L["ffn_down_exps.weight"][e])
        if "ffn_gate_shexp.weight" in L:
            out = out + swiglu_mlp(x, L["ffn_gate_shexp.weight"], L["ffn_up_shexp.weight"], L["ffn_down_shexp.weight"])
        return out

    def logits(self, tokens):
        x = self.embd[np.asarray(tokens)] * self.embedding_multiplier
        pos = np.arange(len(tokens))
        for L in self.layers:
            x = x + self.attention(L, rms_norm(x, L["attn_norm.weight"], self.eps), pos) * self.residual_multiplier
            x = x + self.moe(L, rms_norm(x, L["ffn_norm.weight"], self.eps)) * self.residual_multiplier
        return (rms_norm(x, self.out_norm, self.eps) @ self.out.T) / self.logits_scaling


class Ernie45MoeReference(LlamaShapedReference):
    """Ernie4_5_MoeForCausalLM (transformers' modeling_ernie4_5_moe.py) on a GGUF file:
    Llama's attention (q/k/v biases when use_bias, RoPE on adjacent pairs as the GGUF's
    rows hold them), the first leading_dense_block_count layers a dense SwiGLU, the
    others routed experts: softmax over the router's logits, the top-k chosen by the
    probabilities plus moe_statics' e_score_correction_bias (exp_probs_b), their
    probabilities divided by their sum; the shared experts' MLP added."""

    def __init__(self, path):
        super().__init__(path, "ernie4_5-moe")
        md, p = self.md, self.p
        self.dense_lead = md[p + "leading_dense_block_count"]
        assert md[p + "interleave_moe_layer_step"] == 1

    def attention(self, L, x, positions):
        S, H, hd = x.shape[0], self.n_head, self.head_dim
        proj = lambda n: x @ L[f"attn_{n}.weight"].T + L.get(f"attn_{n}.bias", 0.0)
        q = rotary_pairs(proj("q").reshape(S, H, hd), positions, self.base)
        k = rotary_pairs(proj("k").reshape(S, self.n_kv, hd), positions, self.base)
        v = proj("v").reshape(S, self.n_kv, hd)
        o = causal_gqa(q, k, v, 1.0 / np.sqrt(hd))
        return o @ L["attn_output.weight"].T

    def ffn(self, i, L, x):
        if i < self.dense_lead:
            return swiglu_mlp(x, L["ffn_gate.weight"], L["ffn_up.weight"], L["ffn_down.weight"])
        probs = softmax(x @ L["ffn_gate_inp.weight"].T)
        out = renormalised_experts(L, x, probs, self.top_k, L.get("exp_probs_b.bias"))
        if "ffn_gate_shexp.weight" in L:
            out = out + swiglu_mlp(x, L["ffn_gate_shexp.weight"], L["ffn_up_shexp.weight"], L["ffn_down_shexp.weight"])
        return out

    def logits(self, tokens):
        x = self.embd[np.asarray(tokens)]
        pos = np.arange(len(tokens))
        for i, L in enumerate(self.layers):
            x = x + self.attention(L, rms_norm(x, L["attn_norm.weight"], self.eps), pos)
            x = x + self.ffn(i, L, rms_norm(x, L["ffn_norm.weight"], self.eps))
        return rms_norm(x, self.out_norm, self.eps) @ self.out.T


class HunyuanMoeReference(LlamaShapedReference):
    """HunYuanMoEV1ForCausalLM (Hunyuan-A13B's modeling_hunyuan.py) on a GGUF file: GQA
    with rotate_half RoPE on the whole head at the file's base (the converter folds the
    NTK alpha into it), then query_layernorm / key_layernorm (RMSNorm per head) on the
    rotated q and k; the MoE block a softmax router whose top-k probabilities are divided
    by their sum, plus the shared MLP added."""

    def __init__(self, path):
        super().__init__(path, "hunyuan-moe")
        md, p = self.md, self.p

    def attention(self, L, x, positions):
        S, H, hd = x.shape[0], self.n_head, self.head_dim
        q = rotary_neox((x @ L["attn_q.weight"].T).reshape(S, H, hd), positions, hd, self.base)
        k = rotary_neox((x @ L["attn_k.weight"].T).reshape(S, self.n_kv, hd), positions, hd, self.base)
        q = rms_norm(q, L["attn_q_norm.weight"], self.eps)
        k = rms_norm(k, L["attn_k_norm.weight"], self.eps)
        v = (x @ L["attn_v.weight"].T).reshape(S, self.n_kv, hd)
        o = causal_gqa(q, k, v, 1.0 / np.sqrt(hd))
        return o @ L["attn_output.weight"].T

    def moe(self, L, x):
        probs = softmax(x @ L["ffn_gate_inp.weight"].T)
        out = renormalised_experts(L, x, probs, self.top_k)
        return out + swiglu_mlp(x, L["ffn_gate_shexp.weight"], L["ffn_up_shexp.weight"], L["ffn_down_shexp.weight"])

    def logits(self, tokens):
        x = self.embd[np.asarray(tokens)]
        pos = np.arange(len(tokens))
        for L in self.layers:
            x = x + self.attention(L, rms_norm(x, L["attn_norm.weight"], self.eps), pos)
            x = x + self.moe(L, rms_norm(x, L["ffn_norm.weight"], self.eps))
        return rms_norm(x, self.out_norm, self.eps) @ self.out.T


def reference_for(path):
    """The reference of the file's architecture (one of ARCHS)."""
    if GGUF(path).metadata["general.architecture"] == "hunyuan-moe":
        return HunyuanMoeReference(path)
    if GGUF(path).metadata["general.architecture"] == "ernie4_5-moe":
        return Ernie45MoeReference(path)
    if GGUF(path).metadata["general.architecture"] == "granitemoe":
        return GraniteMoeReference(path)
    if GGUF(path).metadata["general.architecture"] == "glm4moe":
        return Glm4MoeReference(path)
    if GGUF(path).metadata["general.architecture"] == "gpt-oss":
        return GptOssReference(path)
    if GGUF(path).metadata["general.architecture"] == "deepseek2":
        return DeepSeek2Reference(path)
    return Reference(path)
