// What the browser scripts share: a static server for dist/, Chromium with the flags every run
// uses, and large gpt.py-layout model files written on the spot. (run.mjs keeps its own server:
// it records requests, serves a sub-path and can go offline.)
import { chromium } from 'playwright-core';
import { spawn } from 'node:child_process';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/// Headless Chromium as every test and benchmark here runs it.
export function launchChromium() {
  return chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
}

/// Serves `dist` on a free port of 127.0.0.1; resolves to { server, origin }.
export async function serveDist(dist) {
  const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css' };
  const server = http.createServer((req, res) => {
    const file = path.join(dist, decodeURIComponent(new URL(req.url, 'http://x').pathname));
    const target = fs.existsSync(file) && fs.statSync(file).isDirectory() ? path.join(file, 'index.html') : file;
    if (!target.startsWith(dist) || !fs.existsSync(target)) { res.writeHead(404).end(); return; }
    res.writeHead(200, { 'content-type': types[path.extname(target)] ?? 'application/octet-stream' });
    fs.createReadStream(target).pipe(res);
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return { server, origin: `http://127.0.0.1:${server.address().port}` };
}

/// A large gpt.py-layout model of zeros (a sparse file): long enough to load that it can be
/// cancelled. `random`: weights from a tiled block of small random values instead, so every
/// stage (Grams, fingerprints, probe) does real work.
export function bigModel(file, { layers = 8, heads = 16, d = 1024, vocab = 65, context = 128, random = false } = {}) {
  const tensors = [];
  const add = (name, shape) => tensors.push([name, shape]);
  add('token_embedding_table.weight', [vocab, d]);
  add('position_embedding_table.weight', [context, d]);
  for (let l = 0; l < layers; l++) {
    for (let h = 0; h < heads; h++) for (const k of ['key', 'query', 'value']) add(`blocks.${l}.sa.heads.${h}.${k}.weight`, [d / heads, d]);
    add(`blocks.${l}.sa.proj.weight`, [d, d]); add(`blocks.${l}.sa.proj.bias`, [d]);
    add(`blocks.${l}.ffwd.net.0.weight`, [4 * d, d]); add(`blocks.${l}.ffwd.net.0.bias`, [4 * d]);
    add(`blocks.${l}.ffwd.net.2.weight`, [d, 4 * d]); add(`blocks.${l}.ffwd.net.2.bias`, [d]);
    for (const n of ['ln1', 'ln2']) { add(`blocks.${l}.${n}.weight`, [d]); add(`blocks.${l}.${n}.bias`, [d]); }
  }
  add('ln_f.weight', [d]); add('ln_f.bias', [d]);
  add('lm_head.weight', [vocab, d]); add('lm_head.bias', [vocab]);
  const header = {};
  let offset = 0;
  for (const [name, shape] of tensors) {
    const bytes = shape.reduce((a, b) => a * b, 1) * 4;
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(json.length));
  fs.writeFileSync(file, Buffer.concat([length, Buffer.from(json)]));
  if (random) {
    const block = new Float32Array(1 << 18).map(() => (Math.random() - 0.5) * 0.1);
    const bytes = Buffer.from(block.buffer);
    const fd = fs.openSync(file, 'a');
    for (let written = 0; written < offset; written += bytes.length) {
      fs.writeSync(fd, bytes, 0, Math.min(bytes.length, offset - written));
    }
    fs.closeSync(fd);
  }
  fs.truncateSync(file, 8 + json.length + offset);
  return offset;
}

/// The CSS-pixel centre of cell (row, col) of a canvas dense view, from its `data-layout`.
export async function cellPoint(p, canvas, row, col) {
  const box = await p.locator(canvas).boundingBox();
  const [x, y, w, h] = (await p.getAttribute(canvas, 'data-layout')).split(',').map(Number);
  return { x: box.x + x + w * (col + 0.5), y: box.y + y + h * (row + 0.5) };
}

/// The tests' Hub and CDN (`examples/hub_imitation`, built by `cargo test` and scripts/e2e.sh)
/// with `args` (`--repo ORG/NAME=FOLDER`, `--gpt2-small ORG/NAME=REVISION`). It answers in
/// lines: its addresses first, then one line per `served()` asked (the body bytes and requests
/// it has served so far). Resolves to { child, addresses, served }.
export async function hubImitation(root, args) {
  const child = spawn(path.join(root, 'target/release/examples/hub_imitation'), args, { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = [];
  const readers = [];
  let partial = '';
  child.stdout.on('data', (d) => {
    const parts = (partial + d.toString()).split('\n');
    partial = parts.pop();
    for (const line of parts) (readers.shift() ?? ((l) => lines.push(l)))(line);
  });
  const nextLine = () => new Promise((ok, fail) => {
    if (lines.length) return ok(lines.shift());
    readers.push(ok);
    child.once('error', fail);
  });
  const served = async () => {
    child.stdin.write('sent\n');
    return JSON.parse(await nextLine());
  };
  // Switches the imitation's faults on (`hub_imitation::Faults`'s fields, by name).
  const faults = async (switches) => {
    child.stdin.write(`faults ${JSON.stringify(switches)}\n`);
    await nextLine();
  };
  return { child, addresses: JSON.parse(await nextLine()), served, faults };
}
