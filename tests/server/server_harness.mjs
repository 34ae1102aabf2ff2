// Starts `moeflow serve` on an ephemeral 127.0.0.1 port for the tests, and stops it.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const sourceDir = path.resolve(here, '..', '..');
export const binary = process.env.MOEFLOW_BIN ?? path.join(sourceDir, 'build', 'moeflow');
export const defaultModel = path.join(sourceDir, 'models', 'default.gguf');

// Resolves once the server says it is ready; rejects if it exits first.
export function startServer(args = [], { model = defaultModel } = {}) {
  const proc = spawn(binary, ['serve', '-m', model, '--port', '0', '-t', '2', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  return new Promise((resolve, reject) => {
    let port = 0;
    const timer = setTimeout(() => reject(new Error(`server not ready after 60 s:\n${log}`)), 60000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) port = Number(m[1]);
      if (/serve: ready/.test(log) && port) {
        clearTimeout(timer);
        resolve({
          proc,
          port,
          baseURL: `http://127.0.0.1:${port}`,
          log: () => log,
          exited: new Promise((r) => (proc.exitCode !== null ? r(proc.exitCode) : proc.on('exit', (code) => r(code)))),
        });
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before it was ready:\n${log}`));
    });
  });
}

export async function stopServer(s) {
  if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
  await s.exited;
}

// The value of one sample, `name` with its labels as printed (e.g. 'x_total{reason="stop"}').
export async function metric(s, name) {
  const text = await (await fetch(`${s.baseURL}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

export async function metricsText(s) {
  return (await fetch(`${s.baseURL}/metrics`)).text();
}
