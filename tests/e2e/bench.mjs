// Browser benchmark (not a test): the built page in headless Chromium on this machine.
// Measures the wasm start, the demo model's analysis, and a GPT-2-Small-shaped model
// (random weights from `scripts/make_fixtures.py --gpt2-small`, 124 M parameters, 498 MB)
// loaded through the file input: full fingerprint (both modes) and forward + induction probe,
// the analysis worker's peak wasm memory, and the page's longest frame gap meanwhile.
// Usage: node tests/e2e/bench.mjs [dist-dir] [model-dir]  -> prints a Markdown table,
// writes docs/browser-bench.json.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium, serveDist } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const dist = path.resolve(process.argv[2] ?? path.join(root, 'dist'));
const modelDir = path.resolve(process.argv[3] ?? path.join(root, 'bench-data/gpt2-small'));
const runs = +(process.env.RUNS ?? 3);

const { server, origin } = await serveDist(dist);
const browser = await launchChromium();

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const timingsOf = async (page) => JSON.parse(await page.getAttribute('#timings', 'data-json'));
const memoryOf = async (page) => +(/([\d.]+) MB/.exec(await page.textContent('#worker-memory'))?.[1] ?? NaN);

async function one() {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.addInitScript(() => {
    addEventListener('TrunkApplicationStarted', () => {
      window.wasmStarted = performance.now();
      // The demo's grid is complete when the busy line moves on to the probe.
      const watch = () => {
        const busy = document.querySelector('#busy');
        if (!busy) return requestAnimationFrame(watch);
        new MutationObserver(() => {
          if (!window.demoHeads && /Running the induction probe/.test(busy.textContent ?? '')) window.demoHeads = performance.now();
        }).observe(busy, { subtree: true, childList: true, characterData: true });
      };
      watch();
    });
    // The longest gap between animation frames: how long the page was frozen, at worst.
    window.longestFrame = 0;
    let last = performance.now();
    const tick = (t) => { window.longestFrame = Math.max(window.longestFrame, t - last); last = t; requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
  });
  await page.goto(origin + '/');
  await page.waitForSelector('#preview-grid .cell, #head-grid .cell', { timeout: 60000 });
  const demoFirst = await page.evaluate(() => performance.now());
  await page.waitForSelector('#head-grid .cell', { timeout: 60000 });
  const demoReady = await page.evaluate(() => performance.now());
  const wasmStarted = await page.evaluate(() => window.wasmStarted);
  const demoHeads = await page.evaluate(() => window.demoHeads ?? NaN);
  const demo = await timingsOf(page);

  await page.evaluate(() => {
    window.longestFrame = 0;
    window.loadStarted = performance.now();
    // Every head is fingerprinted when the busy line moves on to the probe.
    const busy = document.querySelector('#busy');
    new MutationObserver(() => {
      if (!window.headsDone && /Running the induction probe/.test(busy.textContent ?? '')) window.headsDone = performance.now() - window.loadStarted;
    }).observe(busy, { subtree: true, childList: true, characterData: true });
  });
  const files = ['config.json', 'model.safetensors'].map((f) => path.join(modelDir, f));
  await page.setInputFiles('#file-input', files);
  await page.waitForFunction(() => /12 layers × 12 heads/.test(document.querySelector('#model-info')?.textContent ?? ''), null, { timeout: 600000 });
  const loadWall = await page.evaluate(() => performance.now() - window.loadStarted);
  const headsWall = await page.evaluate(() => window.headsDone ?? NaN);
  // The share-link identity comes from a second worker, once the analysis is shown.
  await page.waitForFunction(() => /SHA-256 [0-9a-f]{12}/.test(document.querySelector('#model-hash')?.textContent ?? ''), null, { timeout: 600000 });
  const hashWall = await page.evaluate(() => performance.now() - window.loadStarted);
  // Raw mode is fingerprinted when first shown.
  await page.click('#mode-raw');
  await page.waitForFunction(() => /fingerprint raw/.test(document.querySelector('#timings')?.dataset.json ?? ''), null, { timeout: 600000 });
  const longestFrame = await page.evaluate(() => window.longestFrame);
  const gpt2 = await timingsOf(page);
  const memory = await memoryOf(page);
  await page.close();
  return { wasmStarted, demoFirst, demoHeads, demoReady, demo, loadWall, headsWall, hashWall, longestFrame, gpt2, memory };
}

const results = [];
for (let i = 0; i < runs; i++) {
  results.push(await one());
  console.error(`run ${i + 1}/${runs} done`);
}
await browser.close();
server.close();

const step = (r, which, name) => r[which].find((t) => t.step === name)?.ms ?? NaN;
const sum = (r, which, names) => names.reduce((a, n) => a + step(r, which, n), 0);
const rows = [
  ['wasm download + compile + start (navigation → app started)', median(results.map((r) => r.wasmStarted))],
  ['demo model: navigation → first heads in the grid (it fills as heads are done)', median(results.map((r) => r.demoFirst))],
  ['demo model: navigation → every head and the induction probe done', median(results.map((r) => r.demoReady))],
  ['demo model: worker analysis (read, Gram, folded fingerprint, induction probe)', median(results.map((r) => r.demo.reduce((a, t) => a + t.ms, 0)))],
  ['GPT-2-Small-shaped: read tensors by byte range', median(results.map((r) => step(r, 'gpt2', 'load')))],
  ['GPT-2-Small-shaped: full fingerprint (Gram + 144 heads × 4 circuits, folded and raw)', median(results.map((r) => sum(r, 'gpt2', ['gram', 'fingerprint folded', 'fingerprint raw'])))],
  ['GPT-2-Small-shaped: forward + induction probe (8 sequences of BOS + 2 × 50 tokens)', median(results.map((r) => step(r, 'gpt2', 'induction probe')))],
  ['GPT-2-Small-shaped: file chosen → every head fingerprinted (folded: the full grid)', median(results.map((r) => r.headsWall))],
  ['GPT-2-Small-shaped: file chosen → overview on screen (read, folded fingerprint, probe)', median(results.map((r) => r.loadWall))],
  ['demo model: app started → every head fingerprinted (the grid complete)', median(results.map((r) => r.demoHeads - r.wasmStarted))],
  ['demo model: app started → every head and the probe done', median(results.map((r) => r.demoReady - r.wasmStarted))],
  ['GPT-2-Small-shaped: file chosen → SHA-256 of 498 MB shown (a second worker, after the analysis)', median(results.map((r) => r.hashWall))],
  ['page: longest frame gap during that load and the raw fingerprint', median(results.map((r) => r.longestFrame))],
];
const memory = Math.max(...results.map((r) => r.memory));
const cores = os.cpus().length;
console.log(`| step (median of ${runs} runs, headless Chromium ${browser.version?.() ?? ''}, ${cores} cores) | time |`);
console.log('|---|---|');
for (const [name, ms] of rows) console.log(`| ${name} | ${ms >= 1000 ? (ms / 1000).toFixed(2) + ' s' : ms.toFixed(0) + ' ms'} |`);
console.log(`| analysis workers' peak wasm memory, all together (GPT-2-Small-shaped loaded, demo dropped) | ${memory.toFixed(0)} MB |`);
console.log(`load average at the end: ${os.loadavg().map((l) => l.toFixed(2)).join(', ')}`);
fs.mkdirSync(path.join(root, 'docs'), { recursive: true });
fs.writeFileSync(path.join(root, 'docs/browser-bench.json'), JSON.stringify({ runs: results, cores }, null, 2) + '\n');
