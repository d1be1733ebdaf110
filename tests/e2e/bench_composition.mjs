// Browser benchmark (not a test): composition scores of a GPT-2-Small-shaped model (random
// weights, `bench-data/gpt2-small-random`, written by scripts/bench_python.py's `write_model`)
// in the built page, beside the CLI on the same files in the same run: the CLI's
// `headprint composition DIR --json --backend cpu` (wall time, peak resident memory), then the
// page in headless Chromium: the model loaded through the file input, the Circuits tab opened,
// the time until its map is drawn and the analysis workers' peak wasm memory.
// Usage: node tests/e2e/bench_composition.mjs [dist-dir] [model-dir]  -> prints a Markdown table.
import { spawnSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { launchChromium, serveDist } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const dist = path.resolve(process.argv[2] ?? path.join(root, 'dist'));
const modelDir = path.resolve(process.argv[3] ?? path.join(root, 'bench-data/gpt2-small-random'));
const runs = +(process.env.RUNS ?? 2);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function cli() {
  const bin = path.join(root, 'target/release/headprint');
  const run = spawnSync('/usr/bin/time', ['-f', '%e %M', bin, 'composition', modelDir, '--json', '--backend', 'cpu', '--quiet'],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  if (run.status !== 0) throw new Error(`the CLI failed: ${run.stderr}`);
  const out = run.stderr.toString();
  const [seconds, kb] = out.trim().split('\n').pop().split(' ').map(Number);
  return { seconds, mb: kb / 1024 };
}

const { server, origin } = await serveDist(dist);
const browser = await launchChromium();

async function tab() {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(origin + '/');
  await page.waitForSelector('#head-grid .cell', { timeout: 120000 });
  const files = ['config.json', 'model.safetensors'].map((f) => path.join(modelDir, f));
  await page.setInputFiles('#file-input', files);
  await page.waitForFunction(() => /12 layers × 12 heads/.test(document.querySelector('#model-info')?.textContent ?? ''), null, { timeout: 600000 });
  // The load's probe and the hashing worker finish first, so the composition runs alone.
  await page.waitForFunction(() => /SHA-256 [0-9a-f]{12}/.test(document.querySelector('#model-hash')?.textContent ?? ''), null, { timeout: 600000 });
  const started = await page.evaluate(() => performance.now());
  await page.click('#tab-circuits');
  await page.waitForFunction(() => document.querySelector('#circuit-map-canvas')?.dataset.rows === '144', null, { timeout: 900000 });
  const seconds = (await page.evaluate(() => performance.now()) - started) / 1000;
  const memory = +(/([\d.]+) MB/.exec(await page.textContent('#worker-memory'))?.[1] ?? NaN);
  await page.close();
  return { seconds, memory };
}

const results = [];
for (let i = 0; i < runs; i++) {
  results.push({ cli: cli(), tab: await tab() });
  console.error(`run ${i + 1}/${runs} done`);
}
await browser.close();
server.close();
console.log(`| GPT-2-Small-shaped composition, three kinds, folded (median of ${runs} runs, ${os.cpus().length} cores) | wall | peak memory |`);
console.log('|---|---|---|');
console.log(`| CLI \`composition --backend cpu\` | ${median(results.map((r) => r.cli.seconds)).toFixed(2)} s | ${median(results.map((r) => r.cli.mb)).toFixed(0)} MB (resident) |`);
console.log(`| page, Circuits tab opened → map drawn (one analysis worker, CPU) | ${median(results.map((r) => r.tab.seconds)).toFixed(2)} s | ${Math.max(...results.map((r) => r.tab.memory)).toFixed(0)} MB (analysis workers' wasm memory) |`);
console.log(`load average at the end: ${os.loadavg().map((l) => l.toFixed(2)).join(', ')}`);
