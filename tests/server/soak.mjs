// Soak test of `moeflow serve` (not in CI: minutes long). C streaming clients send
// chat requests back to back for D seconds; every response must end with a finish
// reason and no request may fail; the server's resident memory is sampled after the
// first minute (warm: KV blocks and buffers touched) and at the end.
//
//   node tests/server/soak.mjs [--clients 64] [--seconds 600] [--parallel 8] [-- extra serve flags]
import fs from 'node:fs';
import OpenAI from 'openai';
import { startServer, stopServer, metric } from './server_harness.mjs';

const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};
const clients = opt('--clients', 64);
const seconds = opt('--seconds', 600);
const parallel = opt('--parallel', 8);
const extra = argv.includes('--') ? argv.slice(argv.indexOf('--') + 1) : [];

const rssKiB = (pid) => Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]);

const s = await startServer(['-np', String(parallel), '--queue', String(clients), '-c', '256', ...extra]);
const client = new OpenAI({ baseURL: `${s.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600000 });
const topics = ['the sea', 'a king', 'rust and iron', 'the night sky', 'a small town', 'bread', 'rivers', 'music'];
let ok = 0, failed = 0, tokens = 0;
const errors = new Map();
const deadline = Date.now() + seconds * 1000;
let rssWarm = 0;
const warmTimer = setTimeout(() => (rssWarm = rssKiB(s.proc.pid)), Math.min(60, seconds / 2) * 1000);

async function worker(w) {
  for (let i = 0; Date.now() < deadline; ++i) {
    try {
      const stream = await client.chat.completions.create({
        messages: [{ role: 'user', content: `Tell me about ${topics[(w + i) % topics.length]}.` }],
        max_tokens: 16 + ((w * 7 + i) % 48),
        temperature: 0.8,
        seed: w * 1000 + i,
        stream: true,
        stream_options: { include_usage: true },
      });
      let finish = null;
      for await (const c of stream) {
        if (c.usage) tokens += c.usage.completion_tokens;
        for (const ch of c.choices) finish = ch.finish_reason ?? finish;
      }
      if (!finish) throw new Error('stream ended without a finish reason');
      ok++;
    } catch (e) {
      failed++;
      const key = String(e.status ?? '') + ' ' + e.message;
      errors.set(key, (errors.get(key) ?? 0) + 1);
    }
  }
}

const t0 = Date.now();
await Promise.all(Array.from({ length: clients }, (_, w) => worker(w)));
clearTimeout(warmTimer);
const rssEnd = rssKiB(s.proc.pid);
const running = await metric(s, 'moeflow_requests_running');
const elapsed = (Date.now() - t0) / 1000;
await stopServer(s);
const report = {
  clients, seconds: elapsed, parallel, requests_ok: ok, requests_failed: failed,
  output_tokens_per_second: tokens / elapsed, rss_warm_mib: rssWarm / 1024, rss_end_mib: rssEnd / 1024,
  running_at_end: running, errors: Object.fromEntries(errors),
};
console.log(JSON.stringify(report, null, 2));
process.exit(failed === 0 && running === 0 ? 0 : 1);
