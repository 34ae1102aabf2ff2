// Cross-check moeflow against llama.cpp (prebuilt CPU binaries from npm, via node-llama-cpp) on
// moeflow's GGUF files. Not part of CI; see README.md for the one-off npm install.
//
// Per model:
//   1. does llama.cpp load it (prints llama.cpp's error if not);
//   2. tokenisation of a few prompts, llama.cpp's tokenizer vs `moeflow run -p`; on a mismatch,
//      again with llama.cpp told tokenizer.ggml.pre = "gpt-2" (a load-time metadata override);
//   3. greedy generation of --n tokens from identical prompt token ids (moeflow's), each engine
//      feeding back its own argmax;
//   4. logits: llama.cpp teacher-forced on moeflow's sequence (prompt + moeflow's greedy tokens),
//      compared row by row with `moeflow run --logits-out`; metric = the one in
//      tests/unit/reference_test.cpp: ||a - b||_2 / ||b||_2 over the vocabulary. If the model has a
//      PyTorch reference next to it (X.logits beside X.gguf, tests/fixtures), llama.cpp is also
//      compared with that on the reference's own token sequence.
// llama.cpp runs with 1 thread, CPU only, F32 KV cache, no flash attention; moeflow with -t 1.
//
// Usage: node check.mjs [--moeflow PATH] [--n 16] [MODEL.gguf ...]
//        (default models: models/default.gguf and the tests/fixtures Mixtral/Qwen3-MoE/OLMoE files)
// Exit status 0 only if every model loads, tokenises identically, and generates identical greedy
// tokens except where the first difference is a near tie (moeflow's top-1 margin over llama.cpp's
// pick is smaller than the engines' largest logit difference on that row).
import {execFileSync} from "node:child_process";
import {existsSync, mkdtempSync, readFileSync, rmSync} from "node:fs";
import {tmpdir} from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = process.env.MOEFLOW_REPO ?? path.resolve(here, "../..");
let moeflow = path.join(repo, "build/moeflow");
let nPredict = 16;
const models = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--moeflow") moeflow = argv[++i];
    else if (argv[i] === "--n") nPredict = Number(argv[++i]);
    else models.push(path.resolve(argv[i]));
}
if (models.length === 0) {
    for (const m of ["models/default.gguf", "tests/fixtures/mixtral-f32.gguf", "tests/fixtures/mixtral-f16.gguf",
        "tests/fixtures/mixtral-bf16.gguf", "tests/fixtures/qwen3moe-f32.gguf", "tests/fixtures/qwen3moe-q8_0.gguf",
        "tests/fixtures/olmoe-f32.gguf", "tests/fixtures/olmoe-q4_0.gguf"])
        models.push(path.join(repo, m));
}
if (!existsSync(moeflow)) {
    console.error(`moeflow binary not found at ${moeflow} (build it, or pass --moeflow PATH)`);
    process.exit(2);
}
const prompts = [
    "In the beginning God created",
    "#include <stdio.h>\nint main",
    "Der Hund",
    "Hello, world! It's 2024... (x+y)*3 == 12345;",
    "    def __init__(self):\n        return None",
    "Привет, мир",
];

const work = mkdtempSync(path.join(tmpdir(), "llamacpp-check-"));
const runMoeflow = (extra) =>
    JSON.parse(execFileSync(moeflow, ["run", "-t", "1", "--temp", "0", "--json", ...extra], {encoding: "utf8"}));

function readLogits(file) {  // format: tools/reference/README.md
    const b = readFileSync(file);
    if (b.toString("latin1", 0, 4) !== "MFLG") throw new Error(`${file}: not a logits file`);
    const nPos = b.readUInt32LE(8), nVocab = b.readUInt32LE(12);
    const tokens = [];
    for (let i = 0; i < nPos; i++) tokens.push(b.readInt32LE(16 + 4 * i));
    const off = 16 + 4 * nPos, rows = [];
    for (let i = 0; i < nPos; i++) {
        const r = new Float32Array(nVocab);
        for (let v = 0; v < nVocab; v++) r[v] = b.readFloatLE(off + 4 * (i * nVocab + v));
        rows.push(r);
    }
    return {tokens, rows, nVocab};
}
const argmax = (r) => r.reduce((bi, x, i) => (x > r[bi] ? i : bi), 0);
const l2rel = (a, b) => {
    let num = 0, den = 0;
    for (let i = 0; i < b.length; i++) { num += (a[i] - b[i]) ** 2; den += b[i] ** 2; }
    return Math.sqrt(num / Math.max(den, 1e-30));
};
function compareRows(a, b) {
    const e = a.map((r, i) => l2rel(r, b[i])).sort((x, y) => x - y);
    const same = a.filter((r, i) => argmax(r) === argmax(b[i])).length;
    return `max ${e[e.length - 1].toExponential(2)}, median ${e[e.length >> 1].toExponential(2)}, ` +
        `argmax equal ${same}/${a.length}`;
}

const llamaErrors = [];  // llama.cpp's error log lines, shown with a failed load
const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, maxThreads: 1,
    logLevel: LlamaLogLevel.error, logger: (level, msg) => llamaErrors.push(msg.trim()),
});
console.log(`llama.cpp: node-llama-cpp prebuilt (${JSON.stringify(llama.llamaCppRelease)}), CPU, 1 thread`);
console.log(`moeflow:   ${moeflow}\n`);

async function logitsOf(seq, tokens, nVocab) {  // teacher-forced: row i = logits after tokens[i]
    await seq.clearHistory();
    const res = await seq.controlledEvaluate(tokens.map((t) => [t, {generateNext: {logits: true, options: {temperature: 0}}}]));
    return res.map((r) => {
        if (r.next.logits.size !== nVocab) throw new Error(`got ${r.next.logits.size} logits, want ${nVocab}`);
        const row = new Float32Array(nVocab);
        for (const [t, v] of r.next.logits) row[t] = v;
        return row;
    });
}

const failed = [];
for (const modelPath of models) {
    const name = path.relative(repo, modelPath);
    console.log(`=== ${name}`);
    let model;
    llamaErrors.length = 0;
    try {
        model = await llama.loadModel({modelPath, gpuLayers: 0});
    } catch (e) {
        await new Promise((r) => setTimeout(r, 200));  // llama.cpp's log arrives asynchronously
        console.log(`  LOAD FAILED: ${e?.message ?? e}`);
        for (const line of new Set(llamaErrors)) console.log(`    llama.cpp: ${line}`);
        console.log();
        failed.push(`${name}: load`);
        continue;
    }
    console.log(`  loaded: arch ${model.fileInfo.metadata.general.architecture}, ` +
        `tokenizer.ggml.pre "${model.fileInfo.metadata.tokenizer?.ggml?.pre}", BOS ${model.tokens.bos}, ` +
        `prepend BOS ${model.tokens.shouldPrependBosToken}`);
    const bos = model.tokens.shouldPrependBosToken && model.tokens.bos != null ? [model.tokens.bos] : [];

    // 2. tokenisation
    const mfPrompt = prompts.map((p) => runMoeflow(["-m", modelPath, "-p", p, "-n", "0"]).prompt_tokens);
    const pieces = (ts) => ts.map((t) => JSON.stringify(model.detokenize([t], true))).join(" ");
    let tokSame = 0;
    for (const [i, p] of prompts.entries()) {
        const lc = [...bos, ...model.tokenize(p, false)], mf = mfPrompt[i];
        if (lc.join() === mf.join()) { tokSame++; continue; }
        console.log(`  tokens differ for ${JSON.stringify(p)}:`);
        console.log(`    llama.cpp (${lc.length}): ${pieces(lc)}`);
        console.log(`    moeflow   (${mf.length}): ${pieces(mf)}`);
    }
    console.log(`  tokenisation: ${tokSame}/${prompts.length} prompts identical`);
    if (tokSame !== prompts.length) {
        failed.push(`${name}: tokenisation`);
        const m2 = await llama.loadModel({modelPath, gpuLayers: 0, metadataOverrides: {tokenizer: {ggml: {pre: "gpt-2"}}}});
        const same2 = prompts.filter((p, i) => [...bos, ...m2.tokenize(p, false)].join() === mfPrompt[i].join()).length;
        console.log(`  tokenisation with tokenizer.ggml.pre overridden to "gpt-2": ${same2}/${prompts.length} identical`);
        await m2.dispose();
    }

    // 3. greedy generation, 4. logits
    const nVocab = model.tokens.nVocab ?? model.fileInfo.metadata.tokenizer.ggml.tokens.length;
    const ctx = await model.createContext({
        contextSize: Math.min(256, model.trainContextSize), threads: 1, batchSize: 64, sequences: 1,
        flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
    });
    const seq = ctx.getSequence();
    let same = 0, total = 0, unexplained = 0;
    const lcRows = [], mfRows = [];
    for (const [pi, ids] of mfPrompt.entries()) {
        const lf = path.join(work, `p${pi}.logits`);
        const mf = runMoeflow(["-m", modelPath, "--prompt-tokens", ids.join(","), "-n", String(nPredict),
            "--ignore-eos", "--logits-out", lf]);
        await seq.clearHistory();
        const gen = {generateNext: {token: true, options: {temperature: 0}}};
        let out = await seq.controlledEvaluate(ids.map((t, i) => (i === ids.length - 1 ? [t, gen] : t)));
        const lcGen = [out[ids.length - 1].next.token];
        while (lcGen.length < nPredict) {
            out = await seq.controlledEvaluate([[lcGen[lcGen.length - 1], gen]]);
            lcGen.push(out[0].next.token);
        }
        const ref = readLogits(lf);
        const lcTf = await logitsOf(seq, ref.tokens, ref.nVocab);
        lcRows.push(...lcTf);
        mfRows.push(...ref.rows);
        const k = lcGen.filter((t, i) => t === mf.tokens[i]).length;
        same += k; total += nPredict;
        if (k !== nPredict) {
            let prefix = 0;
            while (lcGen[prefix] === mf.tokens[prefix]) prefix++;
            // Up to the first difference both engines were fed the same tokens, so row r of both
            // teacher-forced runs is comparable. A near tie: moeflow's margin between its choice and
            // llama.cpp's is below the largest logit difference between the engines on that row.
            const r = ids.length - 1 + prefix, mrow = ref.rows[r];
            const margin = mrow[mf.tokens[prefix]] - mrow[lcGen[prefix]];
            let maxDiff = 0;
            for (let v = 0; v < ref.nVocab; v++) maxDiff = Math.max(maxDiff, Math.abs(lcTf[r][v] - mrow[v]));
            const tie = margin <= maxDiff;
            if (!tie) unexplained++;
            console.log(`  prompt ${pi}: greedy tokens ${k}/${nPredict} equal, first difference at ${prefix}: ` +
                `moeflow ${mf.tokens[prefix]} vs llama.cpp ${lcGen[prefix]}, moeflow's margin ${margin.toFixed(4)}, ` +
                `max |logit diff| on that row ${maxDiff.toFixed(4)} -> ${tie ? "near tie" : "NOT a near tie"}\n` +
                `    llama.cpp: [${lcGen}]\n    moeflow:   [${mf.tokens}]`);
        }
    }
    console.log(`  greedy: ${same}/${total} tokens equal (${prompts.length} prompts x ${nPredict})`);
    if (unexplained > 0) failed.push(`${name}: greedy tokens (${unexplained} divergence(s) not at a near tie)`);
    console.log(`  logits llama.cpp vs moeflow (${lcRows.length} rows), L2 rel: ${compareRows(lcRows, mfRows)}`);
    const refFile = modelPath.replace(/\.gguf$/, ".logits");
    if (existsSync(refFile)) {
        const ref = readLogits(refFile);
        console.log(`  logits llama.cpp vs PyTorch reference (${ref.tokens.length} rows), L2 rel: ` +
            compareRows(await logitsOf(seq, ref.tokens, ref.nVocab), ref.rows));
    }
    await ctx.dispose();
    await model.dispose();
    console.log();
}
rmSync(work, {recursive: true, force: true});
await llama.dispose();
console.log(failed.length === 0 ? "ALL CHECKS PASSED" : `FAILED: ${failed.join("; ")}`);
process.exitCode = failed.length === 0 ? 0 : 1;
