// The spectral-fingerprint study's full-size models in the tab (headless Chromium, the built page):
// each model folder given goes through the file input, then the whole folded grid, the induction
// probe and one head's OV token view are awaited, and the analysis worker's memory is read from the
// page's own report (#worker-memory: the worker's wasm memory, which only grows, so its peak).
// Fails (exit 1) when a model does not open, or when a model under 3 GB of files (Pythia-1B,
// Llama-3.2-1B) needs more than 1.5 GB there (the bound docs/validation.md states for the tab).
// Records each model's run in docs/big-models-tab.json (or $BIG_RESULTS: scripts/test.sh keeps
// its runs under target/), replacing that model's earlier entry and keeping the others.
// Usage: node tests/e2e/big.mjs [--grid-only] dist-dir model-dir...   (folders from
// scripts/make_big_models.py). --grid-only stops once every head is fingerprinted (the busy line
// moves on to the probe), for a model whose probe takes too long to wait for (Llama-3-8B); the
// grid is then the one that fills in while the demo stays shown, and is counted there.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cellPoint, launchChromium, serveDist } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const args = process.argv.slice(2);
const gridOnly = args[0] === '--grid-only';
if (gridOnly) args.shift();
const dist = path.resolve(args[0] ?? path.join(root, 'dist'));
const models = args.slice(1).map((m) => path.resolve(m));
const LIMIT_MB = 1500;

const { server, origin } = await serveDist(dist);
const browser = await launchChromium();
const memoryOf = async (page) => +(/([\d.]+) MB/.exec(await page.textContent('#worker-memory'))?.[1] ?? NaN);
const timingsOf = async (page) => JSON.parse(await page.getAttribute('#timings', 'data-json'));
const MINUTES = 60_000;

const results = [];
let failed = 0;
for (const dir of models) {
  const name = path.basename(dir);
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  const layers = config.num_hidden_layers, heads = config.num_attention_heads;
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json') || f.endsWith('.safetensors')).map((f) => path.join(dir, f));
  const bytes = files.reduce((a, f) => a + fs.statSync(f).size, 0);
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const problems = [];
  page.on('pageerror', (e) => problems.push(e.message));
  page.on('worker', (w) => w.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); }));
  const result = { name, bytes, layers, heads };
  try {
    await page.goto(origin + '/');
    await page.waitForSelector('#head-grid .cell', { timeout: 2 * MINUTES });
    await page.evaluate(() => {
      window.loadStarted = performance.now();
      const busy = document.querySelector('#busy');
      new MutationObserver(() => {
        if (!window.headsDone && /Running the induction probe/.test(busy.textContent ?? '')) {
          window.headsDone = performance.now() - window.loadStarted;
          window.previewNote = document.querySelector('#loading-preview #preview-note')?.textContent ?? '';
        }
      }).observe(busy, { subtree: true, childList: true, characterData: true });
    });
    await page.setInputFiles('#file-input', files);
    if (gridOnly) {
      await page.waitForFunction(() => window.headsDone || document.querySelector('#load-error'), null, { timeout: 120 * MINUTES });
      const error = await page.$('#load-error');
      if (error) throw new Error(`load refused: ${await error.textContent()}`);
      result.headsWall = await page.evaluate(() => window.headsDone);
      const note = await page.evaluate(() => window.previewNote);
      if (!note.includes(`${layers * heads} of ${layers * heads} heads`)) throw new Error(`the filling grid says: ${note}`);
      result.memoryMB = await memoryOf(page);
      await page.screenshot({ path: path.join(here, 'screenshots', `big-${name}-grid.png`) });
      if (problems.length) throw new Error(problems.join('; '));
    } else {
      const shape = new RegExp(`${layers} layers × ${heads} heads`);
      await page.waitForFunction((s) => new RegExp(s).test(document.querySelector('#model-info')?.textContent ?? '') ||
        document.querySelector('#load-error'), shape.source, { timeout: 60 * MINUTES });
      const error = await page.$('#load-error');
      if (error) throw new Error(`load refused: ${await error.textContent()}`);
      result.loadWall = await page.evaluate(() => performance.now() - window.loadStarted);
      // Above 256 heads the grid is a canvas, one cell per head
      // (docs/page.md#dense-views-which-charts-are-svg-and-which-are-canvas).
      const canvas = await page.$('#head-grid-canvas');
      const cells = canvas
        ? +(await canvas.getAttribute('data-rows')) * +(await canvas.getAttribute('data-cols'))
        : await page.locator('#head-grid .cell').count();
      if (cells !== layers * heads) throw new Error(`${cells} cells for ${layers} x ${heads} heads`);
      result.timings = await timingsOf(page);
      const probe = result.timings.find((t) => t.step === 'induction probe');
      if (!probe) throw new Error('no induction probe timing');
      // The induction scores reach the grid's metric.
      await page.selectOption('#metric-select', 'induction');
      await page.waitForFunction(() => /uniformly random/.test(document.querySelector('#metric-note')?.textContent ?? ''), null, { timeout: MINUTES });
      // One head's OV token view: W_E and W_U read a block of rows at a time.
      await page.evaluate(() => { window.headStarted = performance.now(); });
      if (canvas) {
        const at = await cellPoint(page, '#head-grid-canvas', 0, 0);
        await page.mouse.click(at.x, at.y);
      } else {
        await page.click('#head-grid .cell');
      }
      await page.waitForSelector('#self-copy-raw li', { timeout: 10 * MINUTES });
      result.headWall = await page.evaluate(() => performance.now() - window.headStarted);
      result.memoryMB = await memoryOf(page);
      await page.screenshot({ path: path.join(here, 'screenshots', `big-${name}.png`) });
      result.info = (await page.textContent('#model-info')).trim();
      if (problems.length) throw new Error(problems.join('; '));
      // Pythia-1B and Llama-3.2-1B (≤ 2.5 GB of half-precision weights) must stay within 1.5 GB.
      const small = bytes < 3e9;
      if (small && !(result.memoryMB <= LIMIT_MB)) throw new Error(`worker memory ${result.memoryMB} MB > ${LIMIT_MB} MB`);
    }
    result.ok = true;
  } catch (e) {
    result.ok = false;
    result.error = e.message.split('\n')[0];
    result.memoryMB = await memoryOf(page).catch(() => NaN);
    failed++;
  }
  results.push(result);
  const step = (s) => result.timings?.find((t) => t.step === s)?.ms ?? NaN;
  const sec = (ms) => (ms / 1000).toFixed(1) + ' s';
  if (gridOnly) console.log(`${result.ok ? 'ok  ' : 'FAIL'} ${name} (${(bytes / 1e9).toFixed(2)} GB): file → every head fingerprinted ${sec(result.headsWall)}, worker memory ${result.memoryMB} MB` + (result.error ? ` — ${result.error}` : ''));
  else console.log(`${result.ok ? 'ok  ' : 'FAIL'} ${name} (${(bytes / 1e9).toFixed(2)} GB): file → grid + probe ${sec(result.loadWall)} ` +
    `[headers ${sec(step('load'))}, Grams ${sec(step('gram'))}, folded fingerprint ${sec(step('fingerprint folded'))}, ` +
    `probe ${sec(step('induction probe'))}], head OV view ${sec(result.headWall)}, worker memory ${result.memoryMB} MB` +
    (result.error ? ` — ${result.error}` : ''));
  await page.close();
}
await browser.close();
server.close();
const record = path.resolve(process.env.BIG_RESULTS ?? path.join(root, 'docs/big-models-tab.json'));
const earlier = fs.existsSync(record) ? JSON.parse(fs.readFileSync(record, 'utf8')) : [];
const kept = earlier.filter((e) => !results.some((r) => r.name === e.name));
fs.writeFileSync(record, JSON.stringify([...results, ...kept], null, 2) + '\n');
process.exit(failed ? 1 : 0);
