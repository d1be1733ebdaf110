// Browser benchmark (not a test): the Gram stage in the tab on WebGPU (SwiftShader here: Chromium's
// software adapter, `backend=gpu`) against the CPU (`backend=cpu`), side by side, with the FLOP
// count and the achieved FLOP/s. The model is a gpt.py-layout checkpoint of random weights with
// GPT-2 Small's width (768), untied (three Gram products), 8192 tokens by default (SwiftShader
// needs minutes per 10 GFLOP; VOCAB=50257 for GPT-2's whole vocabulary) and one small layer, so
// the load is mostly the Grams. Each backend's exported fingerprint is compared
// (worst relative difference of any quantity).
// Usage: node tests/e2e/bench_gpu.mjs [dist-dir]   (VOCAB=, D=, RUNS= to change the shape and repeats)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, bigModel, serveDist } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const dist = path.resolve(process.argv[2] ?? path.join(root, 'dist'));
const vocab = +(process.env.VOCAB ?? 8192);
const d = +(process.env.D ?? 768);
const runs = +(process.env.RUNS ?? 1);

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-bench-gpu-'));
const model = path.join(tmp, `bench-${vocab}x${d}.safetensors`);
bigModel(model, { layers: 1, heads: 12, d, vocab, context: 128, random: true });
const { server, origin } = await serveDist(dist);

// Untied embedding and unembedding: W_E^T W_E, W_U W_E and W_U W_U^T, 2 · vocab · d² each (nominal).
const flop = 3 * 2 * vocab * d * d;

async function measure(backend, args) {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args });
  const times = [];
  let label = '';
  let json = null;
  try {
    for (let run = 0; run < runs; run++) {
      const context = await browser.newContext({ acceptDownloads: true, serviceWorkers: 'block' });
      const page = await context.newPage();
      await page.goto(`${origin}/#model=demo&backend=${backend}`);
      await page.waitForSelector('#head-grid .cell', { timeout: 120000 });
      await page.setInputFiles('#file-input', model);
      await page.waitForFunction((name) => document.querySelector('#model-name')?.textContent.includes(name),
        path.basename(model), { timeout: 1800000, polling: 500 });
      const timings = JSON.parse(await page.getAttribute('#timings', 'data-json'));
      times.push(timings.find((t) => t.step === 'gram').ms);
      label = (await page.textContent('#model-backend')).trim();
      const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export-json')]);
      json = JSON.parse(fs.readFileSync(await download.path()).toString());
      await context.close();
    }
  } finally {
    await browser.close();
  }
  const ms = [...times].sort((a, b) => a - b)[Math.floor(times.length / 2)];
  return { backend, label, gram_ms: ms, gflop_per_s: flop / (ms / 1000) / 1e9, json };
}

/// Worst difference of any number in the two fingerprints, relative to max(|cpu|, 1).
function worstDifference(a, b) {
  let worst = 0;
  const walk = (x, y) => {
    if (typeof y === 'number' && typeof x === 'number') worst = Math.max(worst, Math.abs(x - y) / Math.max(Math.abs(y), 1));
    else if (y && typeof y === 'object') for (const k of Object.keys(y)) if (k !== 'backend') walk(x?.[k], y[k]);
  };
  walk(a, b);
  return worst;
}

const webgpu = CHROMIUM_ARGS.filter((a) => a !== '--disable-gpu').concat(['--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader']);
// Rows are printed as they are measured (SwiftShader is slow: a long run still shows the CPU's).
console.log(`Gram stage in the tab, vocabulary ${vocab}, d_model ${d}, untied: ${(flop / 1e9).toFixed(1)} GFLOP (nominal), median of ${runs}`);
console.log('(the GPU device was opened and its kernels compiled during the demo load before, so not timed here)');
console.log('| backend | computed on | Grams | achieved |');
console.log('|---|---|---|---|');
const row = (r) => console.log(`| ${r.backend} | ${r.label.replace(/^(Computed|Grams and products) on /, '')} | ${(r.gram_ms / 1000).toFixed(2)} s | ${r.gflop_per_s.toFixed(2)} GFLOP/s |`);
const cpu = await measure('cpu', CHROMIUM_ARGS);
row(cpu);
const gpu = await measure('gpu', webgpu);
row(gpu);
server.close();
fs.rmSync(tmp, { recursive: true });
console.log(`worst difference of a fingerprint quantity (GPU vs CPU, relative to max(|x|, 1)): ${worstDifference(gpu.json.folded, cpu.json.folded).toExponential(2)}`);
