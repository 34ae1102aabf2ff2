#!/usr/bin/env python3
"""How much the papers' similarity signals know about decode routing, offline.

For each decode token of the measured requests and each layer it routed, every
predictor ranks the layer's experts and we count how many of the token's top-k it
puts in its own top-k (precision; chance = k / n_expert):

  pop       popularity over the learning requests
  own       the token's request so far (its prompt included)
  eam3      MoE-Infinity: the 3 learning requests whose EAM (tokens per (layer,
            expert), all tokens) is closest by cosine to the request's EAM so far
  traj      fMoE-like: the 20 learning-request decode tokens whose paths share the
            most (layer, expert) pairs with this token's layers 0..l-1 (layer l >= 1)
  next      the next step instead: the tokens that followed the 20 learning-request
            decode tokens whose whole paths are closest to the previous token's

This is what the `adaptive` policy's similarity and trajectory signals build on
(docs/results/policies.md, "The papers' similarity signals in adaptive").

usage: scripts/similarity_signals.py TRACE N_LEARN N_MEASURE   (needs numpy)
"""
import json
import sys

import numpy as np


def main():
    path, nlearn, nmeas = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    reqs = {}
    for line in open(path):
        r = json.loads(line)
        if "layer" in r:
            reqs.setdefault(r["request"], {}).setdefault(r["iter"], {})[r["layer"]] = (r["phase"], r["experts"])
    L = 1 + max(l for q in reqs.values() for it in q.values() for l in it)
    E = 1 + max(e for q in reqs.values() for it in q.values() for _, ex in it.values() for t in ex if t for e in t)

    def tokens(q):  # (phase, per layer the token's experts or None) per token
        out = []
        for it in sorted(q):
            layers = q[it]
            ph, first = next(iter(layers.values()))
            for t in range(len(first)):
                out.append((ph, [layers[l][1][t] if l in layers and t < len(layers[l][1]) else None for l in range(L)]))
        return out

    ids = sorted(reqs)
    toks = {i: tokens(reqs[i]) for i in ids}
    learn, meas = ids[:nlearn], ids[nlearn:nlearn + nmeas]
    K = len(next(x for _, ls in toks[ids[0]] for x in ls if x))

    def eam(tl):
        m = np.zeros((L, E))
        for _, ls in tl:
            for l, x in enumerate(ls):
                for e in x or []:
                    m[l, e] += 1
        return m

    pop = sum(eam(toks[i]) for i in learn)
    store = [eam(toks[i]) for i in learn]
    traj = np.array([eam([t]) for i in learn for t in toks[i] if t[0] == "decode" and all(t[1])])
    pairs = [(eam([a]), eam([b])) for i in learn
             for a, b in zip([t for t in toks[i] if t[0] == "decode"], [t for t in toks[i] if t[0] == "decode"][1:])]
    prev_paths = np.array([a.flatten() for a, _ in pairs])
    next_paths = np.array([b for _, b in pairs])

    def hits(score, actual):
        return len(set(np.argsort(-score, kind="stable")[:K].tolist()) & set(actual))

    res = {k: [0, 0] for k in ("pop", "own", "eam3", "traj", "next")}
    for i in meas:
        own = np.zeros((L, E))
        prev = None
        for ph, ls in toks[i]:
            if ph == "decode" and prev is not None and len(prev_paths):
                best = np.argsort(-(prev_paths @ eam([(ph, prev)]).flatten()), kind="stable")[:20]
                pred = next_paths[best].sum(0)
                for l, x in enumerate(ls):
                    if x:
                        res["next"][0] += hits(pred[l] + 1e-3 * pop[l], x)
                        res["next"][1] += K
            prev = ls if ph == "decode" else None
            if ph == "decode" and own.sum() > 0:
                q = own.flatten()
                sims = [q @ s.flatten() / (np.linalg.norm(q) * np.linalg.norm(s) + 1e-12) for s in store]
                pe = sum(store[j] for j in np.argsort(sims)[::-1][:3])
                for l, x in enumerate(ls):
                    if not x:
                        continue
                    for name, sc in (("pop", pop[l]), ("own", own[l] + 1e-3 * pop[l]), ("eam3", pe[l] + 1e-3 * pop[l])):
                        res[name][0] += hits(sc, x)
                        res[name][1] += K
                    if l > 0 and len(traj):
                        pref = eam([(ph, [ls[ll] if ll < l else None for ll in range(L)])])
                        s = traj.reshape(len(traj), -1) @ pref.flatten()
                        best = np.argsort(-s, kind="stable")[:20]
                        res["traj"][0] += hits(traj[best, l, :].sum(0) + 1e-3 * pop[l], x)
                        res["traj"][1] += K
            own += eam([(ph, ls)])
    print(f"{path}: {L} layers x {E} experts, top-{K}; {len(traj)} learning decode paths; chance {K / E:.3f}")
    for k, (h, n) in res.items():
        print(f"{k:5s} precision {h / max(n, 1):.3f} over {n} routed slots")


if __name__ == "__main__":
    main()
