// The page's longest frames during a long load: serves dist/, opens the page, loads a random
// gpt.py-layout model whose every stage takes a while (4 layers x 6 heads, d 384, vocab 8192:
// 54 MB) and prints each stage's start, every gap of over 50 ms between animation frames and every
// long animation frame (Long Animation Frames API) with its scripts.
//
//   node scripts/frames.mjs [TAB_SELECTOR]      (after trunk build; e.g. '#tab-probes')
import { chromium } from 'playwright-core';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
const dist = path.resolve('dist');
const model = path.join(fs.mkdtempSync('/tmp/headprint-frames-'), 'stages.safetensors');
writeModel(model);
const server = http.createServer((req, res) => {
  let file = path.join(dist, decodeURIComponent(new URL(req.url, 'http://x').pathname));
  if (fs.statSync(file, { throwIfNoEntry: false })?.isDirectory()) file = path.join(file, 'index.html');
  if (!fs.existsSync(file)) { res.writeHead(404).end(); return; }
  const type = { '.js': 'text/javascript', '.wasm': 'application/wasm', '.html': 'text/html', '.css': 'text/css' }[path.extname(file)] ?? 'application/octet-stream';
  res.writeHead(200, { 'content-type': type }); fs.createReadStream(file).pipe(res);
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await page.goto(`http://127.0.0.1:${server.address().port}/`);
await page.waitForSelector('#head-grid .cell', { timeout: 60000 });
await page.waitForTimeout(1500);
if (process.argv[2]) await page.click(process.argv[2]);
await page.evaluate(() => {
  window.__loaf = []; window.__gaps = [];
  const t0 = performance.now(); window.__t0 = t0;
  let last = t0;
  const tick = (t) => { if (t - last > 50) window.__gaps.push([Math.round(last - t0), Math.round(t - last)]); last = t; requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
  new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__loaf.push({ at: Math.round(e.startTime - t0), dur: Math.round(e.duration), block: Math.round(e.blockingDuration), render: Math.round(e.renderStart ? e.renderStart - e.startTime : -1), layout: Math.round(e.styleAndLayoutStart ? e.styleAndLayoutStart - e.startTime : -1), scripts: e.scripts.map((s) => `${s.invoker}|${s.sourceFunctionName}|${Math.round(s.duration)}ms|fwd${Math.round(s.forcedStyleAndLayoutDuration)}`) }); }).observe({ type: 'long-animation-frame' });
  const busy = document.querySelector('#busy'); window.__stages = [];
  new MutationObserver(() => { const t = (busy.textContent || '').replace(/\d+%/g, ''); if (window.__stages.at(-1)?.[1] !== t) window.__stages.push([Math.round(performance.now() - t0), t.slice(0, 60)]); }).observe(busy, { subtree: true, childList: true, characterData: true });
});
await page.setInputFiles('#file-input', model);
await page.waitForFunction(() => /stages/.test(document.querySelector('#model-name')?.textContent ?? '') && !(document.querySelector('#busy')?.textContent ?? '').trim(), null, { timeout: 300000 });
await page.waitForTimeout(500);
console.log(JSON.stringify(await page.evaluate(() => ({ loaf: window.__loaf, gaps: window.__gaps, stages: window.__stages })), null, 1));
await browser.close(); server.close();

function writeModel(file) {
const { layers, heads, d, vocab, context } = { layers: 4, heads: 6, d: 384, vocab: 8192, context: 256 };
const tensors = []; const add = (n, s) => tensors.push([n, s]);
add('token_embedding_table.weight', [vocab, d]); add('position_embedding_table.weight', [context, d]);
for (let l = 0; l < layers; l++) {
  for (let h = 0; h < heads; h++) for (const k of ['key', 'query', 'value']) add(`blocks.${l}.sa.heads.${h}.${k}.weight`, [d / heads, d]);
  add(`blocks.${l}.sa.proj.weight`, [d, d]); add(`blocks.${l}.sa.proj.bias`, [d]);
  add(`blocks.${l}.ffwd.net.0.weight`, [4 * d, d]); add(`blocks.${l}.ffwd.net.0.bias`, [4 * d]);
  add(`blocks.${l}.ffwd.net.2.weight`, [d, 4 * d]); add(`blocks.${l}.ffwd.net.2.bias`, [d]);
  for (const n of ['ln1', 'ln2']) { add(`blocks.${l}.${n}.weight`, [d]); add(`blocks.${l}.${n}.bias`, [d]); }
}
add('ln_f.weight', [d]); add('ln_f.bias', [d]); add('lm_head.weight', [vocab, d]); add('lm_head.bias', [vocab]);
const header = {}; let offset = 0;
for (const [name, shape] of tensors) { const b = shape.reduce((a, c) => a * c, 1) * 4; header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + b] }; offset += b; }
let json = JSON.stringify(header); json += ' '.repeat((8 - (json.length % 8)) % 8);
const len = Buffer.alloc(8); len.writeBigUInt64LE(BigInt(json.length));
fs.writeFileSync(file, Buffer.concat([len, Buffer.from(json)]));
const block = Buffer.from(new Float32Array(1 << 18).map(() => (Math.random() - 0.5) * 0.1).buffer);
const fd = fs.openSync(file, 'a'); for (let w = 0; w < offset; w += block.length) fs.writeSync(fd, block, 0, Math.min(block.length, offset - w)); fs.closeSync(fd);
}
