// The dense views' longest frames, SVG against canvas, in one run of headless Chromium: a 1024-head
// grid (a random gpt.py-layout model of 32 layers x 32 heads, d_model 64, so it loads in seconds)
// and the 512 x 512 attention heatmap of a 512-token prompt (a second random model, 2 layers x 4
// heads, context 520: the forward pass keeps every head's pattern, which for 1024 heads at 512
// tokens is over its 1 GiB bound; a character model has no BOS). Each view is drawn through each
// path, forced by the page's `?render=` parameter: `svg` (inline SVG / an HTML grid), `canvas` (one
// ImageData for the cells, crates/web/src/ui/canvas.rs) and `canvas-rects` (the cells as plotters
// rectangles on the canvas, the slower way of filling them). For each it records the longest long
// animation frame (Long Animation Frames API: frames over 50 ms, so 0 means none) and the longest
// gap between requestAnimationFrame callbacks from the click that shows the view until a second
// after it appeared, how long the click's own handlers ran (Event Timing; 0 when under 16 ms, the
// API's least threshold) and how long the view took to appear.
//
// The machine's load average (1 min) is recorded before and after each view: the frames are
// only comparable between runs on an equally quiet machine.
//
//   scripts/build-page.sh && node scripts/dense_frames.mjs [docs/dense-views-bench.json]
//   DIST=other/dist node scripts/dense_frames.mjs /tmp/other.json   (another build, e.g. a before)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bigModel, launchChromium, serveDist } from '../tests/e2e/harness.mjs';

const out = process.argv[2] ?? 'docs/dense-views-bench.json';
const LAYERS = 32, HEADS = 32, TOKENS = 512;
const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-dense-'));
const model = path.join(folder, 'dense.safetensors');
bigModel(model, { layers: LAYERS, heads: HEADS, d: 64, vocab: 65, context: 128, random: true });
const long = path.join(folder, 'long.safetensors');
bigModel(long, { layers: 2, heads: 4, d: 64, vocab: 65, context: TOKENS + 8, random: true });
const { server, origin } = await serveDist(path.resolve(process.env.DIST ?? 'dist'));
const load = () => Math.round(os.loadavg()[0] * 100) / 100;
const browser = await launchChromium();

/// Watches frames from now on (the page keeps the records on window).
const watch = () => {
  window.__loaf = []; window.__gap = 0; window.__t0 = performance.now(); window.__ready = null; window.__stop = false;
  let last = performance.now();
  const tick = (t) => { window.__gap = Math.max(window.__gap, t - last); last = t; if (!window.__stop) requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
  new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__loaf.push(e.duration); })
    .observe({ type: 'long-animation-frame' });
  // The click's own handlers (Event Timing: processingStart..End), long frame or not.
  window.__click = 0;
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if (e.name === 'click') window.__click = Math.max(window.__click, e.processingEnd - e.processingStart);
  }).observe({ type: 'event', durationThreshold: 16 });
};
/// Records when `selector` first exists (checked every frame).
const readyWhen = (selector) => {
  const look = () => { if (document.querySelector(selector)) window.__ready = performance.now() - window.__t0; else requestAnimationFrame(look); };
  requestAnimationFrame(look);
};

async function measure(page, selector, show) {
  const loadBefore = load();
  await page.evaluate(watch);
  await page.evaluate(readyWhen, selector);
  await show();
  await page.waitForSelector(selector, { timeout: 300000 });
  await page.waitForTimeout(1000);
  const frames = await page.evaluate(() => {
    window.__stop = true;
    return { longest_frame_ms: Math.round(Math.max(0, ...window.__loaf)), long_frames: window.__loaf.length, longest_raf_gap_ms: Math.round(window.__gap), click_handlers_ms: Math.round(window.__click), appeared_ms: Math.round(window.__ready ?? -1) };
  });
  return { ...frames, load_average: [loadBefore, load()] };
}

const results = [];
for (const render of ['svg', 'canvas', 'canvas-rects']) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', (e) => console.error('page error:', e.message));
  await page.goto(`${origin}/?render=${render}`);
  await page.waitForSelector('#model-info', { timeout: 60000 });
  await page.setInputFiles('#file-input', model);
  await page.waitForFunction((want) => document.querySelector('#model-info')?.textContent.includes(want)
    && !(document.querySelector('#busy')?.textContent ?? '').trim(), `${LAYERS} layers × ${HEADS} heads`, { timeout: 300000 });
  // The grid drawn afresh: away to the probes tab and back.
  await page.click('#tab-probes');
  await page.waitForTimeout(500);
  const grid = render === 'svg' ? '#head-grid .cell' : '#head-grid-canvas';
  const gridFrames = await measure(page, grid, () => page.click('#tab-overview'));
  results.push({ view: `${LAYERS * HEADS}-head grid`, path: render, ...gridFrames });
  console.log(JSON.stringify(results.at(-1)));
  // The heatmap of a 512-token prompt (the worker's forward pass runs beside it).
  await page.setInputFiles('#file-input', long);
  await page.waitForFunction(() => document.querySelector('#model-info')?.textContent.includes('2 layers × 4 heads')
    && !(document.querySelector('#busy')?.textContent ?? '').trim(), null, { timeout: 300000 });
  await page.click('#tab-probes');
  await page.fill('#prompt-input', Array.from({ length: TOKENS }, (_, i) => (i * 7) % 65).join(','));
  const heatmap = render === 'svg' ? '#prompt-heatmap svg rect' : '#prompt-heatmap-canvas';
  const heatmapFrames = await measure(page, heatmap, () => page.click('#run-prompt'));
  results.push({ view: `${TOKENS} x ${TOKENS} heatmap`, path: render, ...heatmapFrames });
  console.log(JSON.stringify(results.at(-1)));
  await page.close();
}

const record = {
  what: 'longest frames while each dense view is drawn, SVG against canvas (scripts/dense_frames.mjs)',
  date: new Date().toISOString(),
  browser: `headless Chromium ${browser.version()}`,
  machine: `${os.cpus().length} cores, ${os.cpus()[0]?.model ?? 'unknown CPU'}`,
  models: [`grid: random gpt.py layout, ${LAYERS} layers x ${HEADS} heads, d_model 64, vocab 65`,
    `heatmap: random gpt.py layout, 2 layers x 4 heads, d_model 64, vocab 65, context ${TOKENS + 8}, a ${TOKENS}-token prompt`],
  target_ms: 50,
  load_average_note: 'load_average: the 1-minute load average before and after each view (2 cores)',
  results,
};
fs.writeFileSync(out, JSON.stringify(record, null, 1) + '\n');
console.log(`written ${out}`);
await browser.close();
server.close();
