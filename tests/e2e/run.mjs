// Browser tests of the built page (dist/), driven by Playwright (playwright-core) and the
// system Chromium. No test runner needed: `node tests/e2e/run.mjs [dist-dir]`.
// Serves dist/ on 127.0.0.1 itself, records every request, saves screenshots under
// tests/e2e/screenshots/, exits non-zero when a test fails.
import { chromium } from 'playwright-core';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import crypto from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { CHROMIUM_ARGS, bigModel, cellPoint, hubImitation } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const dist = path.resolve(process.argv[2] ?? path.join(root, 'dist'));
const shots = path.join(here, 'screenshots');
const fixtures = path.join(root, 'tests/fixtures');
const chromiumPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
fs.mkdirSync(shots, { recursive: true });

const types = {
  '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css',
  '.json': 'application/json', '.safetensors': 'application/octet-stream', '.png': 'image/png',
};
/// dist/ is served at the root and, as a teacher's static host would, under a sub-path.
const SUB_PATH = '/classroom/headprint/';
/// While true, the server drops every connection, as a classroom network that went away.
let offline = false;
const server = http.createServer((req, res) => {
  if (offline) { req.socket.destroy(); return; }
  const url = new URL(req.url, 'http://x');
  const pathname = url.pathname.startsWith(SUB_PATH) ? '/' + url.pathname.slice(SUB_PATH.length) : url.pathname;
  let file = path.join(dist, decodeURIComponent(pathname));
  if (!file.startsWith(dist)) { res.writeHead(403).end(); return; }
  if (fs.existsSync(file) && fs.statSync(file).isDirectory()) file = path.join(file, 'index.html');
  if (!fs.existsSync(file)) { res.writeHead(404).end('not found'); return; }
  const stat = fs.statSync(file);
  res.writeHead(200, {
    'content-type': types[path.extname(file)] ?? 'application/octet-stream',
    'content-length': stat.size,
    'last-modified': stat.mtime.toUTCString(),
  });
  fs.createReadStream(file).pipe(res);
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const origin = `http://127.0.0.1:${server.address().port}`;

const browser = await chromium.launch({
  executablePath: chromiumPath,
  args: CHROMIUM_ARGS,
});
// The offline test has a context of its own; here service workers stay out of the way.
const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true, serviceWorkers: 'block' });
const requests = [];
const problems = [];
// Context-wide, so the analysis worker's requests count too.
context.on('request', (r) => requests.push(r.url()));
function watch(p) {
  p.on('request', (r) => requests.push(r.url()));
  p.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  p.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  p.on('worker', (w) => w.on('console', (m) => { if (m.type() === 'error') problems.push(`worker error: ${m.text()}`); }));
}
const page = await context.newPage();
watch(page);

const results = [];
async function test(name, body) {
  // ONLY=regex runs the matching tests alone (while working on one).
  if (process.env.ONLY && !new RegExp(process.env.ONLY).test(name)) return;
  const started = Date.now();
  try {
    await body();
    results.push({ name, ok: true });
    console.log(`ok   ${name} (${Date.now() - started} ms)`);
  } catch (e) {
    results.push({ name, ok: false });
    console.log(`FAIL ${name}: ${e.message.split('\n')[0]}`);
    await page.screenshot({ path: path.join(shots, `failed-${name.replace(/\W+/g, '-')}.png`) }).catch(() => {});
  }
}
function expect(cond, message) { if (!cond) throw new Error(message); }
const shot = (name, fullPage = false, on = page) => on.screenshot({ path: path.join(shots, `${name}.png`), fullPage });
const sha256 = (bytes) => crypto.createHash('sha256').update(bytes).digest('hex');
/// The page's hash of several files: SHA-256 of the sorted `name:sha256` lines (one file: its own).
function filesHash(files) {
  if (files.length === 1) return sha256(fs.readFileSync(files[0]));
  const lines = files.map((f) => `${path.basename(f)}:${sha256(fs.readFileSync(f))}\n`).sort();
  return sha256(lines.join(''));
}
async function download(p, selector) {
  const [file] = await Promise.all([p.waitForEvent('download'), p.click(selector)]);
  return { name: file.suggestedFilename(), bytes: fs.readFileSync(await file.path()) };
}
/// Waits until the busy line names `stage`, then presses Cancel.
async function cancelAt(stage, timeout = 120000) {
  await page.waitForFunction((s) => (document.querySelector('#busy')?.textContent ?? '').includes(s), stage, { timeout, polling: 20 });
  await page.click('#cancel');
}
/// Waits until page `p` is idle: nothing on its busy line (loads, probes, hashing).
async function idle(p, timeout = 60000) {
  await p.waitForFunction(() => !(document.querySelector('#busy')?.textContent ?? '').trim(), null, { timeout });
}
/// Clears the error line, so the next one read is new.
async function dismissError() {
  if (await page.locator('#load-error').count() > 0) await page.click('#load-error .dismiss');
  await page.waitForSelector('#load-error', { state: 'detached' });
}
/// The shown model still answers: a head's OV logits come from the (fresh) worker.
async function stillUsable(name) {
  expect((await page.textContent('#model-name')).trim() === name, `the shown model stays: ${name}`);
  await page.click('#tab-overview');
  await page.click('#head-grid .cell >> nth=1');
  await page.waitForSelector('#self-copy-raw li', { timeout: 60000 });
}
/// Hovers a canvas cell and returns its tooltip's text.
async function hoverCell(p, canvas, row, col) {
  const at = await cellPoint(p, canvas, row, col);
  await p.mouse.move(at.x, at.y);
  await p.waitForSelector(`.canvas-tip[data-row="${row}"][data-col="${col}"]`);
  return (await p.textContent('.canvas-tip')).trim();
}
/// A PNG's pixel width (IHDR) after checking its signature.
function pngWidth(bytes) {
  expect(bytes.subarray(1, 4).toString() === 'PNG', 'a PNG signature');
  return bytes.readUInt32BE(16);
}
/// An exported canvas chart: a valid standalone SVG with at least `cells` rectangles, and a
/// PNG at least twice the chart's CSS width.
async function checkCanvasExports(p, scope, canvas, cells) {
  const svg = await download(p, `${scope} .chart-export [data-export=svg]`);
  const text = svg.bytes.toString();
  expect(svg.name.endsWith('.svg') && /^<svg[^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/.test(text), `SVG ${svg.name}`);
  expect((text.match(/<rect/g) ?? []).length >= cells, `SVG cells: ${(text.match(/<rect/g) ?? []).length} < ${cells}`);
  const png = await download(p, `${scope} .chart-export [data-export=png]`);
  const css = (await p.locator(canvas).boundingBox()).width;
  expect(png.name.endsWith('.png') && pngWidth(png.bytes) >= 2 * Math.floor(css), `PNG ${png.name} width ${pngWidth(png.bytes)} for ${css} CSS px`);
  return text;
}
async function modelShape() {
  const text = await page.textContent('#model-info');
  const m = text.match(/(\d+) layers × (\d+) heads/);
  expect(m, `no "layers × heads" in ${text}`);
  return { layers: +m[1], heads: +m[2], text };
}

await test('opens ready with every head of the demo model', async () => {
  await page.goto(origin + '/');
  await page.waitForSelector('#head-grid .cell', { timeout: 60000 });
  const { layers, heads } = await modelShape();
  expect(await page.locator('#head-grid .cell').count() === layers * heads, 'grid cell count');
  expect(await page.locator('#bar-chart rect[data-head]').count() === layers * heads, 'bar count');
  await shot('overview');
});

await test('dist/ works from a sub-path of a static host', async () => {
  const sub = await context.newPage();
  watch(sub);
  // Context-wide, so the analysis worker's requests (worker.js, the wasm, the demo) count too.
  const fetched = [];
  const failed = [];
  const onRequest = (r) => fetched.push(r.url());
  const onResponse = (r) => { if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`); };
  context.on('request', onRequest);
  context.on('response', onResponse);
  await sub.goto(origin + SUB_PATH);
  await sub.waitForSelector('#head-grid .cell', { timeout: 60000 });
  const cells = await sub.locator('#head-grid .cell').count();
  context.off('request', onRequest);
  context.off('response', onResponse);
  await sub.close();
  expect(cells === 24, `the demo's 24 heads under ${SUB_PATH}: ${cells}`);
  expect(failed.length === 0, `nothing missing: ${failed.join(', ')}`);
  const outside = fetched.filter((u) => u.startsWith(origin) && !new URL(u).pathname.startsWith(SUB_PATH));
  expect(outside.length === 0, `every file is asked for under the sub-path: ${outside.join(', ')}`);
});

await test('metric choice recolours the grid', async () => {
  const before = await page.getAttribute('#cell-L0H0', 'data-value');
  await page.selectOption('#metric-select', 'induction');
  await page.waitForFunction((b) => document.querySelector('#cell-L0H0')?.dataset.value !== b, before);
  await page.selectOption('#metric-select', 'ov-copying');
});

await test('behaviour on held-out text is measured and labelled', async () => {
  await page.selectOption('#metric-select', 'induction');
  await page.selectOption('#sequence-select', 'text');
  await page.waitForFunction(() => /held-out text/.test(document.querySelector('#metric-note')?.textContent ?? ''), null, { timeout: 30000 });
  const note = await page.textContent('#metric-note');
  expect(!/failed/.test(note), note);
  await shot('overview-heldout');
  await page.click('#tab-compare');
  await page.waitForSelector('#scatter circle.point');
  // The demo's heads vary in both the feature and the behaviour: ρ is defined, over every head.
  const { layers, heads } = await modelShape();
  await page.waitForFunction(() => /Spearman's ρ = [+-]\d\.\d{3} over \d+ heads/.test(document.querySelector('#spearman')?.textContent ?? ''), null, { timeout: 30000 });
  const rho = await page.textContent('#spearman');
  const over = Number(/over (\d+) heads/.exec(rho)[1]);
  expect(layers * heads >= 4 && over === layers * heads, `ρ over every head of the demo: ${rho}`);
  expect(await page.locator('#scatter circle.point').count() === layers * heads, 'one point per demo head');
  await shot('compare-demo', true);
  await page.click('#tab-overview');
  await page.selectOption('#sequence-select', 'random');
  await page.waitForFunction(() => /uniformly random/.test(document.querySelector('#metric-note')?.textContent ?? ''));
  await page.selectOption('#metric-select', 'ov-copying');
});

await test('raw mode is computed when first shown; results export as JSON and CSV, charts as SVG and PNG', async () => {
  const { layers, heads } = await modelShape();
  await page.click('#mode-raw');
  await page.waitForSelector('#head-grid .cell', { timeout: 30000 });
  const raw = await page.getAttribute('#cell-L0H0', 'data-value');
  await page.click('#mode-folded');
  await page.waitForFunction((r) => document.querySelector('#cell-L0H0')?.dataset.value !== r, raw);
  const csv = (await download(page, '#export-csv')).bytes.toString();
  const lines = csv.trim().split('\n');
  expect(lines[0].startsWith('head,layer,head_index,mode,ov-copying'), `CSV header: ${lines[0]}`);
  expect(lines.length === 1 + 2 * layers * heads, `CSV rows: ${lines.length}`);
  const json = JSON.parse((await download(page, '#export-json')).bytes.toString());
  expect(json.folded.heads.length === layers * heads && json.raw.heads.length === layers * heads, 'JSON heads');
  const first = json.folded.heads[0];
  const row = lines.find((l) => l.startsWith(`L${first.layer}H${first.head},`) && l.includes(',folded,'));
  expect(Math.abs(+row.split(',')[4] - first.ov.copying_score) < 1e-9, 'CSV and JSON agree');
  const svg = await download(page, '#bar-chart ~ .chart-export [data-export=svg]');
  expect(svg.name.endsWith('.svg') && /^<svg[^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/.test(svg.bytes.toString()), `SVG ${svg.name}`);
  const png = await download(page, '#bar-chart ~ .chart-export [data-export=png]');
  expect(png.name.endsWith('.png') && png.bytes.subarray(1, 4).toString() === 'PNG', `PNG ${png.name}`);
});

await test('keyboard opens a head', async () => {
  await page.focus('#cell-L0H0');
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#head-title');
  expect((await page.textContent('#head-title')).trim() === 'L1H1', 'opened L1H1');
});

await test('a head shows both spectra, metrics and OV logits', async () => {
  await page.click('#tab-overview');
  await page.click('#cell-L2H0');
  await page.waitForSelector('#qk-plane circle.eig');
  expect(await page.locator('#qk-plane circle.eig').count() > 0, 'QK eigenvalues');
  expect(await page.locator('#ov-plane circle.eig').count() > 0, 'OV eigenvalues');
  expect(await page.locator('#qk-token-plane circle.eig').count() > 0, 'token-space QK eigenvalues');
  expect(/congruence/.test(await page.textContent('#qk-basis-note')), 'the basis note');
  expect(await page.locator('#metrics-table thead th').count() === 6, 'QK, QK (tokens), OV, OV (residual)');
  expect(await page.locator('#metrics-table tbody tr').count() === 5, 'five metrics');
  expect(await page.locator('#self-copy-raw li').count() > 0, 'raw self-copy list');
  expect(await page.locator('#self-copy-normalised li').count() > 0, 'normalised list');
  const pair = await page.textContent('#pair-result');
  expect(/attending `\(` (raises|lowers) `\)` by/.test(pair), `pair lookup: ${pair}`);
  await page.click('#mode-raw');
  await page.waitForSelector('#qk-plane circle.eig');
  await page.click('#mode-folded');
  await shot('head', true);
});

await test('the OV matrix shows every demo token, its k control picks the top k by self-copy logit, and it exports', async () => {
  // The head view of the test above (L2H0, folded).
  await page.waitForSelector('#ov-matrix-canvas', { timeout: 60000 });
  const vocab = +(await page.getAttribute('#ov-matrix-canvas', 'data-rows'));
  expect(vocab > 64 && (await page.getAttribute('#ov-matrix-canvas', 'data-cols')) === String(vocab), `every token: ${vocab}`);
  await page.locator('#ov-matrix-canvas').scrollIntoViewIfNeeded();
  await shot('ov-matrix-all');
  await page.uncheck('#ov-matrix-all');
  await page.waitForFunction(() => document.querySelector('#ov-matrix-canvas')?.dataset.rows === '64', null, { timeout: 60000 });
  await page.fill('#ov-matrix-k', '8');
  await page.press('#ov-matrix-k', 'Enter');
  await page.waitForFunction(() => document.querySelector('#ov-matrix-canvas')?.dataset.rows === '8', null, { timeout: 60000 });
  // Row 0, column 0 is the largest self-copy logit: the first of the raw self-copy list.
  const tip = await hoverCell(page, '#ov-matrix-canvas', 0, 0);
  const m = tip.match(/^attending `(.*)` → logit of `(.*)`: (\S+)$/);
  expect(m && m[1] === m[2], `a diagonal tooltip: ${tip}`);
  const best = (await page.getAttribute('#self-copy-raw li >> nth=0', 'title')).match(/: (\S+)$/)[1];
  expect(Math.abs(+m[3] - +best) < 1e-6, `the top-1 diagonal entry ${m[3]} is the largest self-copy logit ${best}`);
  await page.locator('#ov-matrix-canvas').scrollIntoViewIfNeeded();
  await shot('ov-matrix-top8');
  await checkCanvasExports(page, '#ov-matrix', '#ov-matrix-canvas', 64);
  await page.fill('#ov-matrix-k', '0');
  await page.press('#ov-matrix-k', 'Enter');
  await page.waitForSelector('#ov-matrix-error');
  expect(/must be at least 1/.test(await page.textContent('#ov-matrix-error')), 'k = 0 is one readable error');
  await page.check('#ov-matrix-all');
  await page.waitForSelector('#ov-matrix-canvas', { timeout: 60000 });
});

await test('the Circuits tab maps composition, draws the graph of layers, and a clicked head lists its writers; the head view shows its singular directions', async () => {
  await page.click('#tab-circuits');
  await page.waitForSelector('#circuit-map-canvas', { timeout: 60000 });
  const { layers, heads } = await modelShape();
  const n = layers * heads;
  expect(await page.getAttribute('#circuit-map-canvas', 'data-rows') === String(n), `a row per writer: ${n}`);
  expect(await page.getAttribute('#circuit-map-canvas', 'data-cols') === String(n), 'a column per reader');
  // K by default: L0H0 → L2H0 has a score and its ratio; a pair within one layer is blank.
  const tip = await hoverCell(page, '#circuit-map-canvas', 0, 2 * heads);
  expect(/^L0H0 → L2H0: K-composition \S+ \(\S+× the baseline \S+\)$/.test(tip), `a K tooltip: ${tip}`);
  expect(await page.locator('#circuit-graph svg .node').count() === n, 'a node per head');
  const edges = +(await page.getAttribute('#circuit-graph-caption', 'data-edges'));
  expect(edges > 0 && await page.locator('#circuit-graph path.edge').count() === Math.min(edges, 1500), `edges drawn: ${edges}`);
  // A lower ratio draws at least as many edges.
  await page.fill('#circuit-ratio', '1');
  await page.waitForFunction(() => / 1(\.0+)?× baseline/.test(document.querySelector('#circuit-ratio-value')?.textContent ?? ''));
  const more = +(await page.getAttribute('#circuit-graph-caption', 'data-edges'));
  expect(more >= edges, `ratio 1 draws ${more} ≥ ${edges}`);
  await page.fill('#circuit-ratio', '2');
  await page.waitForFunction(() => / 2(\.0+)?× baseline/.test(document.querySelector('#circuit-ratio-value')?.textContent ?? ''));
  // Clicking a node opens the head: its writers into Q, K and V, and whom it feeds.
  await page.click('#circuit-graph [data-head="L2H0"]');
  await page.waitForSelector('#circuit-head[data-head="L2H0"]');
  for (const kind of ['q', 'k', 'v']) {
    expect(await page.locator(`#writers-${kind} li`).count() === Math.min(5, 2 * heads), `L2H0's ${kind} writers`);
    expect(await page.locator(`#readers-${kind} li`).count() === Math.min(5, (layers - 3) * heads), `L2H0's ${kind} readers`);
  }
  expect(await page.locator('#circuit-graph path.edge.selected').count() > 0 || edges === 0, 'its edges drawn on top');
  const url = page.url();
  for (const part of ['tab=circuits', 'head=L2H0', 'kind=k', 'colour=ratio', 'ratio=2']) expect(url.includes(part), `the link has ${part}: ${url}`);
  await shot('circuits', true);
  // Another kind, coloured by score: the tooltip names it.
  await page.selectOption('#circuit-kind', 'v');
  await page.selectOption('#circuit-colour', 'score');
  await page.mouse.move(0, 0);
  await page.locator('#circuit-map-canvas').scrollIntoViewIfNeeded();
  const vTip = await hoverCell(page, '#circuit-map-canvas', 0, 2 * heads);
  expect(/^L0H0 → L2H0: V-composition/.test(vTip), `a V tooltip: ${vTip}`);
  expect(page.url().includes('kind=v') && page.url().includes('colour=score'), page.url());
  // A writer in the list opens that head.
  await page.click('#writers-v button >> nth=0');
  await page.waitForFunction(() => (document.querySelector('#circuit-head')?.dataset.head ?? 'L2H0') !== 'L2H0');
  await page.selectOption('#circuit-kind', 'k');
  await page.selectOption('#circuit-colour', 'ratio');
  // The head view: OV and QK singular values and each block's tokens.
  await page.click('#circuit-graph [data-head="L2H0"]');
  await page.click('#tab-head');
  await page.waitForSelector('#svd-ov tr.block', { timeout: 60000 });
  const bars = await page.locator('#svd-ov .sv-bar').count();
  expect(bars === 64 || bars > 0, `OV singular values: ${bars}`);
  expect(await page.locator('#svd-qk tr.block').count() > 0, 'QK blocks');
  expect(await page.locator('#svd-ov tr.block:not(.null) .svd-token').count() > 0, 'tokens read out');
  await page.locator('#svd').scrollIntoViewIfNeeded();
  await page.locator('#svd').screenshot({ path: path.join(shots, 'head-svd.png') });
  // A share link of the Circuits tab restores its view.
  const linked = await context.newPage();
  watch(linked);
  await linked.goto(origin + '/#model=demo&tab=circuits&head=L3H1&kind=q&colour=score&ratio=3');
  await linked.waitForSelector('#circuit-head[data-head="L3H1"]', { timeout: 60000 });
  expect(await linked.inputValue('#circuit-kind') === 'q', 'kind from the link');
  expect(await linked.inputValue('#circuit-colour') === 'score', 'colour from the link');
  expect(/ 3(\.0+)?× baseline/.test(await linked.textContent('#circuit-ratio-value')), 'ratio from the link');
  await linked.close();
});

await test('a probe runs and its verdict table appears', async () => {
  await page.click('#tab-probes');
  await page.fill('#prompt-input', '(a(b)c) (a(b)c)');
  await page.click('#run-prompt');
  await page.waitForSelector('#prompt-heatmap svg rect');
  expect(await page.locator('#prompt-heatmap rect.induction-cell').count() > 0, 'induction cells marked');
  // The heatmap's colour bar: its scale, and a gradient of its own (legends sharing an id would
  // all draw the first one's colours, the overview's diverging map among them).
  const scale = await page.$eval('#prompt-heatmap-scale svg', (svg) => ({
    texts: [...svg.querySelectorAll('text')].map((t) => t.textContent),
    fill: svg.querySelector('rect').getAttribute('fill'),
    ids: [...document.querySelectorAll('linearGradient')].map((g) => g.id),
  }));
  expect(scale.texts[0] === 'attention 0' && /^1 /.test(scale.texts[1]), `the heatmap's scale is labelled: ${scale.texts}`);
  expect(scale.fill === 'url(#prompt-heatmap-gradient)', `the colour bar draws its own gradient: ${scale.fill}`);
  expect(new Set(scale.ids).size === scale.ids.length, `gradient ids are unique on the page: ${scale.ids}`);
  await page.waitForSelector('#verdict-table tbody tr, #verdict-error');
  const rows = await page.locator('#verdict-table tbody tr').count();
  const error = await page.locator('#verdict-error').count();
  expect(rows > 0 || error > 0, 'verdict table or its error');
  await shot('probes');
  await page.selectOption('#suite-select', 'swap');
  await page.waitForSelector('#swap-pairs .pair');
  await page.evaluate(() => document.querySelector('#swap-pairs')?.scrollIntoView());
  await shot('probes-swap');
  await page.selectOption('#suite-select', 'bracket');
  await page.waitForSelector('#verdict-table tbody tr');
  await page.evaluate(() => document.querySelector('#verdict-table')?.scrollIntoView());
  await shot('verdict-table');
});

await test('a student answers an exercise sheet: one right, one wrong, the reveal and the score', async () => {
  await page.selectOption('#suite-select', 'exercises-demo');
  await page.waitForSelector('#exercises li.exercise');
  expect(await page.locator('#exercises li.exercise').count() === 7, 'seven questions');
  expect(/0 correct of 0 answered \(7 questions\)/.test(await page.textContent('#exercise-score')), 'nothing answered yet');
  // Nothing is revealed before an answer.
  expect(await page.locator('#exercises .reveal').count() === 0, 'no reveal before answering');
  expect(await page.locator('#verdict-table').count() === 0 && await page.locator('#verdict-hidden').count() === 1,
    'the verdict table does not give the answers away');
  // E1: is L2H0 an induction head? The demo's probe says yes (CLI: 0.8205 >= 0.4).
  await page.click('li[data-id="E1"] .answer-yes');
  await page.waitForSelector('li[data-id="E1"] .reveal.right');
  const e1 = await page.textContent('li[data-id="E1"] .reveal');
  expect(/mean induction score is 0\.82\d; the threshold is 0\.4: an induction head/.test(e1), `E1 reveals the score: ${e1}`);
  // E5: "(a (b" on L2H0; the student clicks the open bracket at key 3 in the query's row of the
  // weightless heatmap; the model sinks on 0 (CLI: 0.7547).
  const e5Picker = 'li[data-id="E5"] .answer-heatmap svg.key-picker';
  await page.waitForSelector(`${e5Picker} rect.key-choice[data-key="3"]`);
  const e5Choices = await page.$$eval(`${e5Picker} rect.key-choice`, (cells) => cells.map((c) => c.getAttribute('data-key')).join(','));
  const e5Query = await page.getAttribute(`${e5Picker} rect.key-choice[data-key="0"]`, 'data-query');
  expect(e5Choices === Array.from({ length: Number(e5Query) + 1 }, (_, i) => i).join(','), `the query row's keys are the choices: ${e5Choices} (query ${e5Query})`);
  expect(!/\d\.\d{4}/.test(await page.innerHTML(e5Picker)), 'the picker shows no weights before the answer');
  expect(await page.locator('li[data-id="E5"] select').count() === 0, 'no drop-down: the heatmap is the answer');
  await page.evaluate(() => document.querySelector('li[data-id="E5"]')?.scrollIntoView());
  await shot('exercise-picker');
  await page.click(`${e5Picker} rect.key-choice[data-key="3"]`);
  await page.waitForSelector('li[data-id="E5"] .reveal.wrong');
  const e5 = await page.textContent('li[data-id="E5"] .reveal');
  expect(/you answered key 3/.test(e5) && /attends most to 0 `\(` \(weight 0\.75\d\d, position-0 sink/.test(e5), `E5 reveals the attention: ${e5}`);
  // The reveal draws the head's real pattern with the query's row boxed; its cell titles carry the weights.
  await page.waitForSelector('li[data-id="E5"] .revealed-heatmap svg');
  expect(await page.locator('li[data-id="E5"] .answer-heatmap').count() === 0, 'the picker gives way to the reveal');
  const e5Titles = await page.$$eval('li[data-id="E5"] .revealed-heatmap rect title', (ts) => ts.map((t) => t.textContent));
  expect(e5Titles.some((t) => new RegExp(`^query ${e5Query} .* → key 0 .*: 0\\.75\\d\\d$`).test(t)), `the revealed row holds 0.75 on key 0: ${e5Titles.slice(-6).join(' | ')}`);
  let score = await page.textContent('#exercise-score');
  expect(/1 correct of 2 answered \(7 questions\)/.test(score), `score after two: ${score}`);
  // E7: the OV row of L2H0 after `)`, from the worker's Row request (CLI: `)` +0.040 first).
  await page.fill('li[data-id="E7"] input.answer-token', ')');
  await page.click('li[data-id="E7"] button.check');
  await page.waitForSelector('li[data-id="E7"] .reveal.right');
  expect(/It promotes most: `\)` \+0\.0(39|40)\d/.test(await page.textContent('li[data-id="E7"] .reveal')), 'E7 reveals the OV row');
  score = await page.textContent('#exercise-score');
  expect(/2 correct of 3 answered/.test(score), `score after three: ${score}`);
  expect(/suite=exercises-demo/.test(page.url()), `a built-in sheet is linked by name: ${page.url()}`);
  await page.evaluate(() => document.querySelector('#exercises')?.scrollIntoView());
  await shot('exercises');
});

await test('a teacher sheet travels compressed in the share link, and prints with its QR code', async () => {
  const sheet = {
    name: 'my-sheet', description: 'A sheet written by a teacher.',
    prompts: [
      { id: 'Q1', text: 'abc abc', question: { kind: 'attend', head: 'L2H0' } },
      { id: 'Q2', text: 'xyz', question: { kind: 'induction', head: 'L0H3' } },
    ],
  };
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-'));
  const file = path.join(tmp, 'my-sheet.json');
  fs.writeFileSync(file, JSON.stringify(sheet));
  await page.setInputFiles('#suite-file', file);
  await page.waitForSelector('#exercises li[data-id="Q2"]');
  await page.waitForFunction(() => /sheet=/.test(location.hash));
  const link = page.url();
  const encoded = new URL(link).hash.match(/sheet=([A-Za-z0-9_-]+)/)[1];
  expect(encoded.length < JSON.stringify(sheet).length, `deflated: ${encoded.length} characters`);
  const linked = await context.newPage();
  watch(linked);
  await linked.goto(link);
  await linked.waitForSelector('#exercises li[data-id="Q2"]', { timeout: 60000 });
  const questions = await linked.locator('#exercises li.exercise').allTextContents();
  expect(questions.length === 2 && /Which key will L2H0 attend to most/.test(questions[0]) && /Is L0H3 an induction head\?/.test(questions[1]),
    `the same exercise: ${questions.join(' | ')}`);
  expect(/my-sheet \(loaded\)/.test(await linked.textContent('#suite-select')), 'the sheet is the loaded suite');
  await linked.click('li[data-id="Q2"] .answer-no');
  await linked.waitForSelector('li[data-id="Q2"] .reveal.right');
  // The heatmap answer works from the keyboard: Tab reaches the keys, Enter chooses one.
  await linked.waitForSelector('li[data-id="Q1"] rect.key-choice[data-key="1"]');
  await linked.focus('li[data-id="Q1"] rect.key-choice[data-key="0"]');
  await linked.keyboard.press('Tab');
  expect(await linked.evaluate(() => document.activeElement?.getAttribute('data-key')) === '1', 'Tab moves to the next key');
  await linked.keyboard.press('Enter');
  await linked.waitForSelector('li[data-id="Q1"] .reveal');
  expect(/you answered key 1/.test(await linked.textContent('li[data-id="Q1"] .reveal')), 'Enter answers with the focused key');
  // A damaged sheet in a link says so once the page is up; the built-in suite stays.
  await linked.goto(origin + '/#model=demo&tab=probes&sheet=AAAA');
  await linked.reload();
  await linked.waitForSelector('#load-error', { timeout: 60000 });
  const damaged = await linked.textContent('#load-error');
  expect(/exercise sheet does not inflate/.test(damaged), `the damaged sheet is named: ${damaged}`);
  await linked.close();

  // The QR code is drawn for print only (a long link's would slow every change of the view).
  expect(await page.locator('#print-qr svg').count() === 0, 'no QR code drawn on screen');
  await page.emulateMedia({ media: 'print' });
  expect(await page.isVisible('#print-handout'), 'the handout shows in print');
  await page.waitForSelector('#print-qr svg', { timeout: 10000 });
  expect(await page.locator('#print-qr svg').count() === 1, 'a QR code SVG');
  expect((await page.textContent('#print-link')).trim() === page.url(), 'the link as text');
  expect(!(await page.isVisible('#prompt-input')) && !(await page.isVisible('nav')), 'controls hidden in print');
  expect(await page.isVisible('#prompt-heatmap svg') && await page.isVisible('#exercises'), 'the chart and the questions print');
  expect(!(await page.isVisible('li[data-id="Q1"] .answer')), 'answer controls hidden in print');
  await shot('print', true);
  await page.emulateMedia({ media: 'screen' });
  expect(!(await page.isVisible('#print-handout')), 'no handout on screen');
  // A sheet too large for a link is left out of it, and the page says to share the file.
  const big = { name: 'big-sheet', prompts: Array.from({ length: 300 }, (_, i) => ({
    id: `B${i}`, text: crypto.randomBytes(12).toString('hex'), question: { kind: 'induction', head: 'L2H0' } })) };
  const bigFile = path.join(tmp, 'big-sheet.json');
  fs.writeFileSync(bigFile, JSON.stringify(big));
  await page.setInputFiles('#suite-file', bigFile);
  await page.waitForSelector('#sheet-too-long');
  await page.waitForFunction(() => /big-sheet/.test(document.querySelector('#suite-select')?.textContent ?? '') && !/sheet=/.test(location.hash));
  await page.selectOption('#suite-select', 'bracket');
  await page.waitForSelector('#verdict-table tbody tr');
  await page.emulateMedia({ media: 'print' });
  expect(await page.isVisible('#verdict-table'), 'the tables print');
  expect(/suite=bracket/.test(await page.textContent('#print-link')), 'the printed link follows the view');
  await page.emulateMedia({ media: 'screen' });
});

let demoName = '';
await test('a GPT-2 fixture loads through the file input', async () => {
  demoName = (await page.textContent('#model-name')).trim();
  await page.setInputFiles('#file-input', ['config.json', 'tokenizer.json', 'model.safetensors']
    .map((f) => path.join(fixtures, 'gpt2', f)));
  await page.waitForFunction(() => /gpt2 · 2 layers × 2 heads/.test(document.querySelector('#model-info')?.textContent ?? ''), null, { timeout: 60000 });
  await page.click('#tab-overview');
  expect(await page.locator('#head-grid .cell').count() === 4, 'four heads');
  await shot('loaded-gpt2');
});

await test('the BOS switch reruns the probe and is recorded in exports and links', async () => {
  expect(/BOS <\|endoftext\|> \(id 1/.test(await page.textContent('#model-bos')), 'the BOS is named');
  await page.selectOption('#metric-select', 'copy-fidelity');
  await page.waitForFunction(() => /after BOS/.test(document.querySelector('#metric-note')?.textContent ?? ''));
  await page.uncheck('#prepend-bos');
  await page.waitForFunction(() => {
    const note = document.querySelector('#metric-note')?.textContent ?? '';
    return /uniformly random/.test(note) && !/after BOS/.test(note);
  }, null, { timeout: 30000 });
  const json = JSON.parse((await download(page, '#export-json')).bytes.toString());
  expect(json.prepend_bos === false && json.bos.id === 1, `export records the switch: ${json.prepend_bos}`);
  expect(json.induction.uniform_random.report.Ok.bos === null, 'the probe ran without the BOS');
  expect(/bos=off/.test(page.url()), `the link records the switch: ${page.url()}`);
  await page.check('#prepend-bos');
  await page.waitForFunction(() => /after BOS/.test(document.querySelector('#metric-note')?.textContent ?? ''), null, { timeout: 30000 });
  await page.selectOption('#metric-select', 'ov-copying');
});

await test('a broken file shows its error and keeps the previous model', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-'));
  const broken = path.join(tmp, 'broken.safetensors');
  fs.writeFileSync(broken, Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 1, 2, 3]));
  const before = (await page.textContent('#model-name')).trim();
  await page.setInputFiles('#file-input', broken);
  await page.waitForSelector('#load-error', { timeout: 30000 });
  const message = await page.textContent('#load-error');
  expect(/broken\.safetensors/.test(message), `error names the file: ${message}`);
  expect((await page.textContent('#model-name')).trim() === before, 'previous model kept');
  expect(await page.locator('#head-grid .cell').count() === 4, 'previous grid kept');
  await shot('load-error');
});

await test('compare lists every model loaded and correlates features with behaviour', async () => {
  await page.click('#tab-compare');
  await page.waitForSelector('#compare-table tbody tr');
  const measured = await page.locator('#compare-table tbody tr:not(.claimed)').count();
  expect(measured >= 2, `rows for the demo and the fixture: ${measured}`);
  expect(await page.locator('#compare-table tbody tr.claimed').count() === 4, "the spectral-fingerprint study's four claims");
  await page.selectOption('#scatter-x', 'qk-imaginary');
  await page.selectOption('#scatter-y', 'induction');
  expect(await page.locator('#scatter circle.point').count() === 4, 'one point per head');
  await shot('compare', true);
});

await test('a share link restores its view, and a local model link checks the file', async () => {
  const linked = await context.newPage();
  watch(linked);
  await linked.goto(origin + '/#model=demo&tab=head&head=L2H1&metric=qk-imaginary&mode=raw&seq=random&suite=quote');
  await linked.waitForSelector('#head-title');
  await linked.waitForFunction(() => document.querySelector('#head-title')?.textContent.trim() === 'L2H1', null, { timeout: 60000 });
  expect(await linked.getAttribute('#mode-raw', 'aria-pressed') === 'true', 'raw mode restored');
  await linked.click('#tab-overview');
  await linked.waitForFunction(() => /tab=overview/.test(location.hash));
  expect(await linked.inputValue('#metric-select') === 'qk-imaginary', 'metric restored');
  const url = new URL(linked.url());
  expect(/model=demo/.test(url.hash) && /head=L2H1/.test(url.hash) && /suite=quote/.test(url.hash), `URL keeps the view: ${url.hash}`);

  const files = ['config.json', 'tokenizer.json', 'model.safetensors'].map((f) => path.join(fixtures, 'gpt2', f));
  const hash = filesHash(files);
  await linked.goto(origin + `/#model=file&name=model.safetensors&sha256=${hash.slice(0, 12)}&tab=head&head=L1H0`);
  await linked.reload();
  await linked.waitForSelector('#awaited');
  await linked.waitForSelector('#head-grid .cell, #head-title', { timeout: 60000 });
  await shot('share-link-awaiting', false, linked);
  await linked.setInputFiles('#file-input', files);
  await linked.waitForFunction(() => !document.querySelector('#awaited') && /gpt2/.test(document.querySelector('#model-info')?.textContent ?? ''), null, { timeout: 60000 });
  expect((await linked.textContent('#head-title')).trim() === 'L1H0', 'linked head restored');
  expect((await linked.textContent('#model-hash')).includes(hash.slice(0, 12)), 'hash shown');
  expect(await linked.locator('#load-error').count() === 0, 'no hash complaint');

  await linked.goto(origin + '/#model=file&name=model.safetensors&sha256=000000000000&tab=overview');
  await linked.reload();
  await linked.waitForSelector('#awaited');
  await linked.setInputFiles('#file-input', files);
  await linked.waitForSelector('#load-error', { timeout: 60000 });
  expect(/not the same file/.test(await linked.textContent('#load-error')), 'a different file is named as such');
  await linked.close();
});

await test('hostile token texts stay text: nothing runs, the layout holds, the exports parse', async () => {
  const dir = path.join(fixtures, 'hostile');
  const dialogs = [];
  page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  const elements = () => page.evaluate(() => ['script', 'style', 'img', 'iframe', 'object'].map((t) => document.querySelectorAll(t).length).join(','));
  const before = await elements();
  // A lone surrogate in the vocabulary: refused by name, the shown model stays.
  const shown = (await page.textContent('#model-name')).trim();
  await page.setInputFiles('#file-input', path.join(dir, 'lone-surrogate.safetensors'));
  await page.waitForSelector('#load-error', { timeout: 30000 });
  const refused = await page.textContent('#load-error');
  expect(/lone-surrogate\.safetensors/.test(refused) && /not a JSON list of strings/.test(refused), `lone surrogate refused: ${refused}`);
  expect((await page.textContent('#model-name')).trim() === shown, 'the previous model stays');
  // The vocabulary (markup, </script>, ]]>, quotes, bidi controls, NUL, U+FFFF) through the head view.
  await page.setInputFiles('#file-input', path.join(dir, 'model.safetensors'));
  await page.waitForFunction(() => /gptchar · 2 layers × 2 heads/.test(document.querySelector('#model-info')?.textContent ?? ''), null, { timeout: 60000 });
  await page.click('#tab-overview');
  await page.click('#cell-L1H0');
  await page.waitForSelector('#self-copy-raw li');
  const listed = await page.textContent('#self-copy-raw');
  expect(listed.includes('<img\u2423src=x\u2423onerror=window.__pwned=1>') && listed.includes('</script>') && listed.includes(']]>'),
    `the tokens are listed as text: ${listed}`);
  expect(!/[\u202e\u2066]/.test(listed) && listed.includes('\ufffdevil'), 'bidi controls are shown as U+FFFD');
  // The tokenizer's words (script, attribute breakers, <style>, CSV formulas) through a prompt, a suite and the exports.
  // (The prompt below encodes only once this model, with its tokenizer, is shown.)
  await page.setInputFiles('#file-input', [path.join(dir, 'model.safetensors'), path.join(dir, 'tokenizer.json')]);
  const words = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')).model.vocab;
  const typed = Object.keys(words).filter((w) => w !== '[UNK]' && !/\s/.test(w));
  await page.click('#tab-probes');
  await page.fill('#prompt-input', typed.join(' '));
  await page.click('#run-prompt');
  await page.waitForFunction((n) => document.querySelectorAll('#prompt-heatmap svg text').length === 2 * n, typed.length, { timeout: 60000 });
  const labels = await page.$$eval('#prompt-heatmap svg > text', (ts) => ts.map((t) => t.firstChild?.textContent ?? ''));
  expect(labels[0] === '<script>window.__pwned=3</script>' && labels.includes('<style>*{display:none!important}</style>'),
    `the words are labels, as text: ${labels.slice(0, 4).join(' | ')}`);
  const svg = (await download(page, '#prompt-heatmap ~ .chart-export [data-export=svg]')).bytes.toString();
  const parsed = await page.evaluate((text) => {
    const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
    return { error: doc.querySelector('parsererror')?.textContent ?? null,
      elements: [...new Set([...doc.querySelectorAll('*')].map((e) => e.localName))].sort().join(','),
      texts: [...doc.querySelectorAll('svg > text')].map((t) => t.firstChild?.textContent ?? '') };
  }, svg);
  expect(parsed.error === null, `the SVG export parses as XML: ${parsed.error}`);
  expect(parsed.elements === 'rect,svg,text,title', `only chart elements in the SVG export: ${parsed.elements}`);
  expect(JSON.stringify(parsed.texts) === JSON.stringify(labels), 'the SVG export holds the same labels');
  // A suite of those words: its verdict table, and its JSON export read back equal.
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-hostile-'));
  const suite = { name: 'hostile', description: '</script><img src=x onerror=window.__pwned=6>', prompts: [{ id: '"><b>', text: typed.join(' ') }] };
  fs.writeFileSync(path.join(tmp, 'hostile.json'), JSON.stringify(suite));
  await page.setInputFiles('#suite-file', path.join(tmp, 'hostile.json'));
  await page.waitForSelector('#verdict-table tbody tr', { timeout: 30000 });
  const row = await page.textContent('#verdict-table tbody tr');
  expect(row.includes('"><b>'), `the prompt id is text in the table: ${row}`);
  const saved = JSON.parse((await download(page, '#save-suite')).bytes.toString());
  expect(JSON.stringify(saved.prompts.map((p) => [p.id, p.text])) === JSON.stringify(suite.prompts.map((p) => [p.id, p.text])), 'the suite export reads back equal');
  await page.click('#tab-overview');
  const json = JSON.parse((await download(page, '#export-json')).bytes.toString());
  expect(json.config.vocab === 13, 'the results JSON parses');
  const csv = (await download(page, '#export-csv')).bytes.toString().trim().split('\n');
  expect(csv.every((l) => l.split(',').length === csv[0].split(',').length), 'every CSV row has the header\'s columns');
  // Nothing ran, nothing was added, the page is laid out as before.
  expect(await page.evaluate(() => window.__pwned) === undefined && dialogs.length === 0, 'no script from a token ran');
  expect(await elements() === before, `no element from a token: ${before} → ${await elements()}`);
  await page.click('#tab-probes');
  expect(await page.isVisible('nav') && await page.isVisible('#prompt-input') && await page.isVisible('#tab-overview'), 'the layout holds');
  await page.evaluate(() => document.querySelector('#prompt-heatmap')?.scrollIntoView());
  await shot('hostile-tokens');
  fs.rmSync(tmp, { recursive: true });
  await page.selectOption('#suite-select', 'bracket');
});

await test('cancel works at every stage and the shown model stays usable; frames stay short during a long load', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-stages-'));
  // Every stage takes a while: a big vocabulary (Grams), 24 heads of width 384 (fingerprints), a long probe.
  const shape = { layers: 4, heads: 6, d: 384, vocab: 8192, context: 256, random: true };
  const stages = path.join(tmp, 'stages.safetensors');
  bigModel(stages, shape);
  // The long load, measured: the longest gap between animation frames, and the longest
  // animation frame the browser reports (Long Animation Frames API), from file to overview.
  await page.evaluate(() => {
    const m = { gap: 0, loaf: 0, loafScript: '', stages: {}, t0: performance.now() };
    window.__frames = m;
    let last = performance.now();
    const tick = (t) => { m.gap = Math.max(m.gap, t - last); last = t; if (!m.stop) requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
    try {
      new PerformanceObserver((list) => {
        for (const e of list.getEntries()) {
          if (e.duration > m.loaf) {
            m.loaf = e.duration;
            const at = (t) => (t ? Math.round(t - e.startTime) : '-');
            m.loafScript = `at ${Math.round(e.startTime - m.t0)} ms (render from ${at(e.renderStart)}, style and layout from ${at(e.styleAndLayoutStart)}, blocking ${Math.round(e.blockingDuration)} ms) `
              + (e.scripts ?? []).map((s) => `${s.invoker} ${s.sourceFunctionName} ${Math.round(s.duration)} ms`).join('; ');
          }
        }
      }).observe({ type: 'long-animation-frame' });
    } catch { m.loaf = -1; }
    const busy = document.querySelector('#busy');
    new MutationObserver(() => {
      const text = busy.textContent ?? '';
      for (const s of ['Computing the embedding Grams', 'Fingerprinting heads', 'Running the induction probe', 'Identifying the files']) {
        if (text.includes(s) && !(s in m.stages)) m.stages[s] = Math.round(performance.now() - m.t0);
      }
    }).observe(busy, { subtree: true, childList: true, characterData: true });
  });
  await page.setInputFiles('#file-input', stages);
  await page.waitForFunction(() => /stages\.safetensors/.test(document.querySelector('#model-name')?.textContent ?? '') && !(document.querySelector('#busy')?.textContent ?? '').trim(), null, { timeout: 300000 });
  const frames = await page.evaluate(() => { const m = window.__frames; m.stop = true; return { ...m, total: Math.round(performance.now() - m.t0) }; });
  console.log(`     long load (${JSON.stringify(shape)}): ${frames.total} ms; stages began at ${JSON.stringify(frames.stages)} ms; longest rAF gap ${frames.gap.toFixed(1)} ms; longest animation frame ${frames.loaf > 0 ? `${frames.loaf.toFixed(1)} ms ${frames.loafScript}` : 'none of 50 ms or more (the API reports only those)'}`);
  expect(frames.gap > 0, 'frames were measured');
  const shown = 'stages.safetensors';
  // The share link's SHA-256 came after the analysis, and the load waited for none of it.
  await page.waitForFunction(() => /SHA-256 [0-9a-f]{12}/.test(document.querySelector('#model-hash')?.textContent ?? ''), null, { timeout: 60000 });
  const stagesSeen = await page.evaluate(() => window.__frames.stages);
  expect(stagesSeen['Identifying the files'] > stagesSeen['Running the induction probe'], `hashing starts after the analysis: ${JSON.stringify(stagesSeen)}`);
  await stillUsable(shown);
  // A suite on the shown model: 40 prompts of 200 ids.
  const suite = { name: 'long-suite', prompts: Array.from({ length: 40 }, (_, i) => ({ id: `S${i}`, text: Array.from({ length: 200 }, (_, j) => (i * 31 + j * 7) % 8192).join(',') })) };
  fs.writeFileSync(path.join(tmp, 'long-suite.json'), JSON.stringify(suite));
  await page.click('#tab-probes');
  await page.setInputFiles('#suite-file', path.join(tmp, 'long-suite.json'));
  await cancelAt('Running the suite long-suite');
  await page.waitForFunction(() => /Cancelled: the suite was not run/.test(document.querySelector('#verdict-error')?.textContent ?? ''), null, { timeout: 30000 });
  expect(await page.locator('#running-suite').count() === 0, 'the busy line no longer names the suite');
  await stillUsable(shown);
  // Loading another model, cancelled at each stage.
  const other = path.join(tmp, 'other.safetensors');
  fs.copyFileSync(stages, other);
  // (The next test cancels a bigger file while its layers are read and fingerprinted.)
  // (The files' SHA-256 is computed after the analysis is shown, so it is no stage of the load.)
  for (const stage of ['Computing the embedding Grams', 'Fingerprinting heads', 'Running the induction probe']) {
    await dismissError();
    await page.setInputFiles('#file-input', other);
    await cancelAt(stage);
    await page.waitForSelector('#load-error');
    expect(/Cancelled: other\.safetensors was not loaded/.test(await page.textContent('#load-error')), `cancel during "${stage}" is reported`);
    expect(await page.locator('#hashing').count() === 0 && await page.locator('#progress').count() === 0, `nothing runs after cancelling "${stage}"`);
    await stillUsable(shown);
    console.log(`     cancelled during "${stage}"; ${shown} still answers`);
  }
  // The shown model's file stays: a worker restarted by a later cancel reads it again.
  fs.rmSync(other);
  fs.rmSync(path.join(tmp, 'long-suite.json'));
});

await test('a long load shows progress and can be cancelled; the shown model stays usable', async () => {
  await page.click('#tab-overview');
  const before = (await page.textContent('#model-name')).trim();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-big-'));
  const big = path.join(tmp, 'big.safetensors');
  bigModel(big);
  await dismissError();
  await page.setInputFiles('#file-input', big);
  // Weights are read a layer at a time as heads are fingerprinted: 8 layers of 1024-wide zeros.
  await page.waitForFunction(() => /Fingerprinting heads/.test(document.querySelector('#busy')?.textContent ?? ''), null, { timeout: 30000, polling: 20 });
  await shot('progress');
  await page.click('#cancel');
  await page.waitForSelector('#load-error');
  expect(/Cancelled: big\.safetensors was not loaded/.test(await page.textContent('#load-error')), 'cancel is reported');
  expect((await page.textContent('#model-name')).trim() === before, 'the shown model stays');
  // The fresh worker holds the shown model again: a head's OV logits still come.
  await page.click('#head-grid .cell');
  await page.waitForSelector('#self-copy-raw li', { timeout: 30000 });
  fs.rmSync(tmp, { recursive: true });
});

await test('after one visit the page works offline, local files too; a new version is announced', async () => {
  // A build deployed two hours ago: the browser's HTTP cache would call it fresh for twelve
  // minutes on its heuristic, so the service worker must revalidate to see the next one.
  const wasm = path.join(dist, 'headprint-web_bg.wasm');
  const deployed = new Date(Date.now() - 2 * 3600_000);
  fs.utimesSync(wasm, deployed, deployed);
  const visit = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const p = await visit.newPage();
  watch(p);
  await p.goto(origin + '/');
  await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
  // Active (so installed: every file of the app cached), and in control of the page.
  await p.evaluate(() => navigator.serviceWorker.ready);
  await p.reload();
  await p.waitForFunction(() => navigator.serviceWorker.controller !== null, null, { timeout: 30000 });
  offline = true;
  await visit.setOffline(true);
  try {
    await p.reload();
    await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
    expect(await p.locator('#head-grid .cell').count() === 24, 'the demo offline');
    const files = ['config.json', 'tokenizer.json', 'model.safetensors'].map((f) => path.join(fixtures, 'gpt2', f));
    await p.setInputFiles('#file-input', files);
    await p.waitForFunction(() => /gpt2/.test(document.querySelector('#model-info')?.textContent ?? ''), null, { timeout: 60000 });
    await shot('offline-local-file', false, p);
  } finally {
    offline = false;
    await visit.setOffline(false);
  }
  // A new build (the wasm's validators change): the next online visit runs it and says so.
  expect(await p.locator('#sw-updated').count() === 0, 'no update announced before one');
  const later = new Date(Date.now() + 60_000);
  fs.utimesSync(wasm, later, later);
  await p.reload();
  await p.waitForSelector('#sw-updated', { timeout: 90000 });
  expect(/updated since your last visit/.test(await p.textContent('#sw-updated')), 'the update is announced');
  await visit.close();
});

await test('many heads get the canvas grid: hover gives the exact value, keyboard and click open heads; long prompts a canvas heatmap', async () => {
  const p = await context.newPage();
  watch(p);
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-dense-')), 'dense.safetensors');
  bigModel(file, { layers: 18, heads: 16, d: 32, vocab: 65, context: 128, random: true });
  // Loaded first (the demo held back), the grid that fills in during the load is a canvas too:
  // no HTML cell a head. A MutationObserver sees every state it passes through.
  const first = await context.newPage();
  watch(first);
  await first.route('**/models/nietzsche-char.safetensors', () => {});
  await first.goto(origin + '/');
  await first.waitForSelector('#file-input', { state: 'attached', timeout: 60000 });
  await first.evaluate(() => {
    const seen = window.__preview = { canvas: 0, shape: null, cells: 0, notes: [] };
    new MutationObserver(() => {
      const canvas = document.querySelector('#preview-grid-canvas');
      if (canvas) { seen.canvas++; seen.shape = `${canvas.dataset.rows}x${canvas.dataset.cols}`; }
      seen.cells = Math.max(seen.cells, document.querySelectorAll('#preview-grid .cell, #preview-grid button, #preview-grid [data-head]').length);
      const note = document.querySelector('#preview-note')?.textContent;
      if (note && seen.notes.at(-1) !== note) seen.notes.push(note);
    }).observe(document.body, { childList: true, subtree: true, characterData: true, attributes: true });
  });
  await first.setInputFiles('#file-input', file);
  await first.waitForFunction(() => /18 layers × 16 heads/.test(document.querySelector('#model-info')?.textContent ?? ''), null, { timeout: 120000 });
  const preview = await first.evaluate(() => window.__preview);
  expect(preview.canvas > 0 && preview.shape === '18x16', `the preview grid was a canvas of 18 x 16: ${JSON.stringify(preview)}`);
  expect(preview.cells === 0, `no HTML cell a head in the preview: ${preview.cells}`);
  expect(preview.notes.some((n) => /of 288 heads so far/.test(n)), `the preview counted heads: ${preview.notes.join(' | ')}`);
  await first.unrouteAll({ behavior: 'ignoreErrors' });
  await first.close();
  await p.goto(origin + '/');
  await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
  // Loaded after the demo: its grid fills in above the demo's, which stays until it is done.
  await p.evaluate(() => {
    const seen = window.__loading = { beside: 0, notes: [] };
    new MutationObserver(() => {
      const preview = document.querySelector('#loading-preview #preview-grid-canvas');
      if (preview && document.querySelector('#head-grid .cell') && /nietzsche/.test(document.querySelector('#model-info')?.textContent ?? '')) seen.beside++;
      const note = document.querySelector('#loading-preview #preview-note')?.textContent;
      if (note && seen.notes.at(-1) !== note) seen.notes.push(note);
    }).observe(document.body, { childList: true, subtree: true, characterData: true, attributes: true });
  });
  await p.setInputFiles('#file-input', file);
  await p.waitForFunction(() => /18 layers × 16 heads/.test(document.querySelector('#model-info')?.textContent ?? '')
    && !(document.querySelector('#busy')?.textContent ?? '').trim(), null, { timeout: 120000 });
  const loading = await p.evaluate(() => window.__loading);
  expect(loading.beside > 0, `the loading model's grid showed beside the demo's: ${JSON.stringify(loading)}`);
  expect(loading.notes.some((n) => /of 288 heads so far/.test(n)), `it counted heads: ${loading.notes.join(' | ')}`);
  expect(await p.locator('#loading-preview').count() === 0, 'the loading grid is gone once the model is shown');
  await p.click('#tab-overview');
  await p.waitForSelector('#head-grid-canvas');
  expect(await p.locator('#head-grid .cell').count() === 0, '288 heads: no button grid');
  expect(await p.getAttribute('#head-grid-canvas', 'data-rows') === '18' && await p.getAttribute('#head-grid-canvas', 'data-cols') === '16', 'layers x heads');
  const json = JSON.parse((await download(p, '#export-json')).bytes.toString());
  const tip = await hoverCell(p, '#head-grid-canvas', 7, 9);
  const want = json.folded.heads.find((h) => h.layer === 7 && h.head === 9).ov.copying_score;
  const shown = tip.match(/^L7H9 OV copying score: (\S+)$/);
  expect(shown && +shown[1] === want, `hover ${tip} is the exported ${want} exactly`);
  await shot('dense-grid', false, p);
  await checkCanvasExports(p, '#dense-grid', '#head-grid-canvas', 288);
  // Keyboard: focus the canvas, Home, right, Enter opens that head.
  await p.focus('#head-grid-canvas');
  const row = +(await p.getAttribute('.canvas-tip', 'data-row'));
  await p.keyboard.press('Home');
  await p.keyboard.press('ArrowRight');
  await p.keyboard.press('Enter');
  await p.waitForSelector('#head-title');
  expect((await p.textContent('#head-title')).trim() === `L${row}H1`, `Enter opened L${row}H1`);
  await p.click('#tab-overview');
  const at = await cellPoint(p, '#head-grid-canvas', 3, 4);
  await p.mouse.click(at.x, at.y);
  await p.waitForSelector('#head-title');
  expect((await p.textContent('#head-title')).trim() === 'L3H4', 'a click opened L3H4');
  // A 100-token prompt: the heatmap is a canvas with its colour bar.
  await p.click('#tab-probes');
  await p.fill('#prompt-input', Array.from({ length: 100 }, (_, i) => (i * 7) % 40).join(','));
  await p.click('#run-prompt');
  await p.waitForSelector('#prompt-heatmap-canvas', { timeout: 60000 });
  const cell = await hoverCell(p, '#prompt-heatmap-canvas', 50, 10);
  expect(/^query 50 `#\d+` → key 10 `#\d+`: 0\.\d+/.test(cell), `heatmap tooltip: ${cell}`);
  const svg = await checkCanvasExports(p, '#prompt-heatmap', '#prompt-heatmap-canvas', 100 * 101 / 2);
  expect(/attention weight/.test(svg) && /\b1\.000\b/.test(svg) && /\b0\.000\b/.test(svg), 'the heatmap has its colour bar, 0 to 1');
  await p.locator('#prompt-heatmap').scrollIntoViewIfNeeded();
  await shot('dense-heatmap', false, p);
  await p.close();
});

/// Every quantity of two exported fingerprints (`folded`, the GPU's and the CPU's) within
/// `tolerance`: numbers relative to max(|cpu|, 1) (`scale`: to |cpu| alone), spectra matched
/// eigenvalue to nearest eigenvalue within tolerance × the largest; the rest equal. Returns
/// the worst difference, relative to what was allowed × tolerance.
function compareFingerprints(gpu, cpu, tolerance) {
  let worst = 0;
  let checked = 0;
  const walk = (g, c, where, key) => {
    if (key === 'backend') return;
    if (typeof c === 'number') {
      expect(typeof g === 'number', `${where}: GPU ${g}, CPU ${c}`);
      const allowed = tolerance * (key === 'scale' ? Math.abs(c) : Math.max(Math.abs(c), 1));
      const diff = Math.abs(g - c);
      expect(diff <= allowed, `${where}: GPU ${g}, CPU ${c} (allowed ±${allowed})`);
      if (allowed > 0) worst = Math.max(worst, (diff / allowed) * tolerance);
      checked++;
    } else if (key === 'eigenvalues' && Array.isArray(c)) {
      expect(Array.isArray(g) && g.length === c.length, `${where}: eigenvalue count`);
      const largest = Math.max(0, ...c.map(([re, im]) => Math.hypot(re, im)));
      const unused = g.slice();
      for (const [re, im] of c) {
        let best = -1, distance = Infinity;
        unused.forEach(([r, i], k) => { const d = Math.hypot(r - re, i - im); if (d < distance) { distance = d; best = k; } });
        expect(distance <= tolerance * largest, `${where}: eigenvalue ${re}+${im}i unmatched (nearest off by ${distance})`);
        if (largest > 0) worst = Math.max(worst, distance / largest);
        unused.splice(best, 1);
        checked++;
      }
    } else if (Array.isArray(c)) {
      expect(Array.isArray(g) && g.length === c.length, `${where}: length`);
      c.forEach((v, i) => walk(g[i], v, `${where}[${i}]`, key));
    } else if (c !== null && typeof c === 'object') {
      expect(g !== null && typeof g === 'object', `${where}: object`);
      for (const k of Object.keys(c)) walk(g[k], c[k], `${where}.${k}`, k);
    } else {
      expect(g === c, `${where}: GPU ${JSON.stringify(g)}, CPU ${JSON.stringify(c)}`);
    }
  };
  walk(gpu, cpu, 'folded', 'folded');
  expect(checked > 100, `only ${checked} quantities compared`);
  return worst;
}

/// Tolerance of every fingerprint quantity computed on a GPU against the CPU: 1e-4 relative, as
/// docs/validation.md#references-and-tolerances states for WebGPU in the tab.
const GPU_TOLERANCE = 1e-4;

/// The induction probe of two exports, one run on a GPU: every head's four scores and the
/// prefix-copy accuracy within 1e-4 absolute, and the same induction heads (score >= 0.4), as
/// docs/validation.md states. Returns the largest difference.
function compareProbes(gpu, cpu) {
  const [g, c] = [gpu, cpu].map((json) => json.induction.uniform_random.report.Ok);
  expect(g && c && g.heads.length === c.heads.length && g.heads.length > 0, 'both probes ran on every head');
  let worst = Math.abs(g.prefix_copy_accuracy - c.prefix_copy_accuracy);
  g.heads.forEach((head, i) => {
    for (const score of ['induction_score', 'previous_token_score', 'duplicate_token_score', 'copy_fidelity']) {
      const difference = Math.abs(head[score] - c.heads[i][score]);
      expect(difference <= 1e-4, `L${head.layer}H${head.head} ${score}: ${head[score]} on the GPU, ${c.heads[i][score]} on the CPU`);
      worst = Math.max(worst, difference);
    }
  });
  const inductionHeads = (report) => report.heads.filter((h) => h.induction_score >= 0.4).map((h) => `L${h.layer}H${h.head}`).join(' ');
  expect(inductionHeads(g) === inductionHeads(c), `the same induction heads: ${inductionHeads(g)} | ${inductionHeads(c)}`);
  expect(worst <= 1e-4, `prefix-copy accuracy: ${g.prefix_copy_accuracy} | ${c.prefix_copy_accuracy}`);
  return worst;
}

/// Opens a fixture's `files` through the file input of page `p`, waits for the model bar to
/// say `family` with 2 layers, and returns its exported JSON.
async function fixtureExport(p, name, files, family) {
  await p.setInputFiles('#file-input', files.map((f) => path.join(fixtures, name, f)));
  await p.waitForFunction((family) => new RegExp(`${family} · 2 layers`).test(document.querySelector('#model-info')?.textContent ?? ''), family, { timeout: 60000 });
  return JSON.parse((await download(p, '#export-json')).bytes.toString());
}

/// The GPT-2 fixture through the file input of page `p`, exported.
const gpt2FixtureExport = (p) => fixtureExport(p, 'gpt2', ['config.json', 'tokenizer.json', 'model.safetensors'], 'gpt2');
/// The Llama 3.2 fixture, whose weights are bf16, through the file input, exported.
const llama32FixtureExport = (p) => fixtureExport(p, 'llama32', ['config.json', 'model.safetensors'], 'llama');

/// The demo's and the GPT-2 fixture's exported fingerprints on the CPU (the GPU tests' reference).
const cpuExports = {};
await test('backend=cpu in a link computes on the CPU and says so', async () => {
  const p = await context.newPage();
  watch(p);
  await p.goto(origin + '/#model=demo&backend=cpu');
  await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
  expect((await p.textContent('#model-backend')).trim() === 'Computed on CPU', 'the page names the CPU');
  expect(await p.locator('#backend-note').count() === 0, 'no note when the CPU was asked for');
  expect(await p.inputValue('#backend-choice') === 'cpu', 'the setting shows the link');
  cpuExports.demo = JSON.parse((await download(p, '#export-json')).bytes.toString());
  expect(cpuExports.demo.backend.name === 'cpu', `JSON backend ${JSON.stringify(cpuExports.demo.backend)}`);
  cpuExports.gpt2 = await gpt2FixtureExport(p);
  cpuExports.llama32 = await llama32FixtureExport(p);
  expect(/backend=cpu/.test(p.url()), `the link keeps the backend: ${p.url()}`);
  await p.close();
});

await test("backend=gpu runs on SwiftShader's WebGPU and matches the CPU", async () => {
  // A second browser with WebGPU on SwiftShader (a software adapter, so only a forced `gpu`
  // takes it; the flags below ask Chromium for it).
  const args = CHROMIUM_ARGS.filter((a) => a !== '--disable-gpu').concat(['--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader']);
  const gpuBrowser = await chromium.launch({ executablePath: chromiumPath, args });
  try {
    const gpuContext = await gpuBrowser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true, serviceWorkers: 'block' });
    const p = await gpuContext.newPage();
    watch(p);
    gpuContext.on('request', (r) => requests.push(r.url()));
    await p.goto(origin + '/#model=demo&backend=gpu');
    await p.waitForSelector('#head-grid .cell', { timeout: 90000 });
    const label = (await p.textContent('#model-backend')).trim();
    expect(/^Grams and products on WebGPU — .*swiftshader/.test(label), `the page names the GPU's work, WebGPU and the adapter: ${label}`);
    expect(await p.locator('#backend-note').count() === 0, 'no fallback note');
    // The probe asked the GPU too: it says which ran it, and a fallback's reason is its tooltip.
    const probeLabel = (await p.textContent('#probe-backend')).trim();
    const probeWhy = (await p.getAttribute('#probe-backend', 'title')) || '';
    expect(probeLabel === 'probe on WebGPU', `the probe's backend: ${probeLabel} (${probeWhy})`);
    const demo = JSON.parse((await download(p, '#export-json')).bytes.toString());
    const probeBackend = demo.induction.uniform_random.backend;
    expect(probeBackend.name === 'gpu', `the export's probe backend: ${JSON.stringify(probeBackend)}`);
    const worstDemoProbe = compareProbes(demo, cpuExports.demo);
    expect(demo.backend.name === 'gpu' && /swiftshader.*\(WebGPU\)/.test(demo.backend.adapter), `JSON backend ${JSON.stringify(demo.backend)}`);
    // The bytes that crossed to and from the GPU, by stage: the demo's three 256 x 256 Grams
    // come back once each as two f32 parts per entry (the two symmetric ones, their upper
    // triangles); the page says the totals.
    const stages = (demo.backend.stages || []).map((s) => s.stage).join(',');
    expect(stages === 'grams,heads', `the stages of the bytes moved: ${JSON.stringify(demo.backend)}`);
    expect(demo.backend.stages[0].bytes_from_device === (256 * 257 + 256 * 256) * 8, `the Grams read back: ${JSON.stringify(demo.backend.stages[0])}`);
    const sum = (way) => demo.backend.stages.reduce((total, s) => total + s[way], 0);
    expect(demo.backend.bytes_to_device === sum('bytes_to_device') && demo.backend.bytes_from_device === sum('bytes_from_device'), 'totals are the stages\' sums');
    expect(/MB to the GPU, .* MB back\)$/.test(label), `the page says the bytes moved: ${label}`);
    const worstDemo = compareFingerprints(demo.folded, cpuExports.demo.folded, GPU_TOLERANCE);
    await shot('webgpu-swiftshader', false, p);
    // A GPT-2 fixture through the file input (the GPU device is kept between loads).
    const gpt2 = await gpt2FixtureExport(p);
    expect(gpt2.backend.name === 'gpu', `GPT-2 JSON backend ${JSON.stringify(gpt2.backend)}`);
    const worstGpt2 = compareFingerprints(gpt2.folded, cpuExports.gpt2.folded, GPU_TOLERANCE);
    expect(gpt2.induction.uniform_random.backend.name === 'gpu', `GPT-2's probe backend: ${JSON.stringify(gpt2.induction.uniform_random.backend)}`);
    const worstGpt2Probe = compareProbes(gpt2, cpuExports.gpt2);
    // A bf16 file: its weights cross in their own two bytes and are widened on the device. Its
    // one Gram's stage sends the 50 x 24 embedding in bf16 and the product's 64-byte shape.
    const llama32 = await llama32FixtureExport(p);
    expect(llama32.backend.name === 'gpu', `Llama 3.2's backend ${JSON.stringify(llama32.backend)}`);
    expect(llama32.backend.stages[0].bytes_to_device === 50 * 24 * 2 + 64, `bf16 to the device: ${JSON.stringify(llama32.backend.stages[0])}`);
    const worstLlama32 = compareFingerprints(llama32.folded, cpuExports.llama32.folded, GPU_TOLERANCE);
    expect(llama32.induction.uniform_random.backend.name === 'gpu', `Llama 3.2's probe backend: ${JSON.stringify(llama32.induction.uniform_random.backend)}`);
    const worstLlama32Probe = compareProbes(llama32, cpuExports.llama32);
    console.log(`     WebGPU (SwiftShader) vs CPU, worst relative difference: demo ${worstDemo.toExponential(2)}, gpt2 ${worstGpt2.toExponential(2)}, llama32 (bf16) ${worstLlama32.toExponential(2)}`);
    console.log(`     the probe on WebGPU vs CPU, worst absolute difference: demo ${worstDemoProbe.toExponential(2)}, gpt2 ${worstGpt2Probe.toExponential(2)}, llama32 ${worstLlama32Probe.toExponential(2)}`);
  } finally {
    await gpuBrowser.close();
  }
});

await test('backend=gpu without WebGPU falls back to the CPU with a note', async () => {
  const p = await context.newPage();
  watch(p);
  await p.goto(origin + '/#model=demo&backend=gpu');
  await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
  expect((await p.textContent('#model-backend')).trim() === 'Computed on CPU', 'the CPU computed');
  const note = (await p.textContent('#backend-note')).trim();
  expect(/no usable GPU .*computed on the CPU/.test(note), `the note: ${note}`);
  const json = JSON.parse((await download(p, '#export-json')).bytes.toString());
  expect(json.backend.name === 'cpu' && json.backend.note === note, `JSON backend ${JSON.stringify(json.backend)}`);
  expect(JSON.stringify(json.folded.heads) === JSON.stringify(cpuExports.demo.folded.heads), 'the CPU numbers, exactly');
  await shot('gpu-fallback-note', false, p);
  await p.close();
});

await test('the compare tab follows a repository over training: slider, grid, a head\'s line and spectrum, the table', async () => {
  // Two checkpoints that differ: at step0 layer 1's output projection is zero (its heads' OV
  // circuits cannot be read), at step1000 the gpt2 fixture itself; step999 is not on the server.
  const early = fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-e2e-step0-'));
  for (const f of ['config.json', 'tokenizer.json']) fs.copyFileSync(path.join(fixtures, 'gpt2', f), path.join(early, f));
  const weights = fs.readFileSync(path.join(fixtures, 'gpt2', 'model.safetensors'));
  const headerLength = Number(weights.readBigUInt64LE(0));
  const [start, end] = JSON.parse(weights.subarray(8, 8 + headerLength).toString())['transformer.h.1.attn.c_proj.weight'].data_offsets;
  weights.fill(0, 8 + headerLength + start, 8 + headerLength + end);
  fs.writeFileSync(path.join(early, 'model.safetensors'), weights);
  const imitation = await hubImitation(root, ['--repo', `test-org/ckpt@step0=${early}`,
    '--repo', `test-org/ckpt@step1000=${path.join(fixtures, 'gpt2')}`]);
  try {
    const { addresses } = imitation;
    // The CLI's timeline of the same revisions, from the same Hub: what the page must show.
    const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'headprint-e2e-timeline-'));
    const cli = JSON.parse(execFileSync(path.join(root, 'target/release/headprint'),
      ['timeline', 'hf:test-org/ckpt', '--revisions', 'step0,step1000,step999', '--json', '--backend', 'cpu'],
      { env: { ...process.env, HF_ENDPOINT: addresses.hub, HEADPRINT_CACHE: cache, HF_HUB_CACHE: path.join(cache, 'hf') } }).toString());
    const linkContext = await browser.newContext({ viewport: { width: 1280, height: 1400 }, serviceWorkers: 'block' });
    const p = await linkContext.newPage();
    p.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    const hub = encodeURIComponent(addresses.hub);
    const asked = `timeline=${encodeURIComponent('hf:test-org/ckpt')}&revisions=${encodeURIComponent('step0,step1000,step999')}`;
    await p.goto(`${origin}/#hub=${hub}&tab=compare&${asked}`);
    await p.waitForFunction(() => document.querySelectorAll('#timeline-table tbody tr').length === 3, null, { timeout: 120000 });
    await idle(p);
    const tableRows = (pg) => pg.$$eval('#timeline-table tbody tr', (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent.trim())));
    const rows = await tableRows(p);
    for (const [i, revision] of ['step0', 'step1000'].entries()) {
      const want = cli.table[i];
      expect(rows[i][0] === revision && rows[i][2] === cli.revisions[i].commit.slice(0, 12), `row ${i}: ${rows[i]}`);
      expect(rows[i][3] === want.mean_qk_imaginary_fraction.toFixed(3), `row ${i}'s QK imaginary fraction ${rows[i][3]}, CLI ${want.mean_qk_imaginary_fraction}`);
    }
    expect(rows[2][0] === 'step999' && rows[2][3].startsWith('error: hf:test-org/ckpt@step999') && rows[2][3].includes('not found'),
      `the missing revision is one line on its row: ${rows[2]}`);
    expect(p.url().includes(asked) && p.url().includes(`hub=${hub}`), `the share link carries the repository, revisions and Hub: ${p.url()}`);
    // The grid at step1000, coloured by the QK imaginary fraction: the CLI's series' numbers.
    await p.selectOption('#timeline-metric', 'qk-imaginary');
    await p.fill('#timeline-slider', '1');
    await p.waitForFunction(() => document.querySelector('#timeline-at')?.textContent === 'step1000');
    const series = (layer, head, name) => cli.heads.find((h) => h.layer === layer && h.head === head).series[name];
    for (const [layer, head] of [[0, 0], [0, 1], [1, 0], [1, 1]]) {
      const cell = (await p.textContent(`#timeline-grid [data-head="L${layer}H${head}"]`)).trim();
      expect(cell === series(layer, head, 'qk_imaginary_fraction')[1].toFixed(3), `L${layer}H${head}: ${cell}`);
    }
    // L1H0's line: a point at each revision that has the value; its OV is unreadable at step0.
    await p.click('#timeline-grid [data-head="L1H0"]');
    await p.waitForSelector('#timeline-line svg');
    expect(await p.locator('#timeline-line circle').count() === 2, 'QK: step0 and step1000 (step999 failed)');
    expect(await p.locator('#timeline-spectrum svg').count() === 1, 'the spectrum at step1000');
    await p.selectOption('#timeline-metric', 'ov-copying');
    await p.waitForFunction(() => document.querySelectorAll('#timeline-line circle').length === 1);
    await p.fill('#timeline-slider', '0');
    const unreadable = (await p.textContent('#timeline-grid [data-head="L1H0"]')).trim();
    expect(unreadable === '–' && series(1, 0, 'ov_copying_score')[0] === null, `L1H0's OV at step0: ${unreadable}`);
    await p.selectOption('#timeline-metric', 'qk-imaginary');
    await p.fill('#timeline-slider', '1');
    await p.locator('#timeline-grid').scrollIntoViewIfNeeded();
    await shot('timeline', true, p);
    // Each revision is kept in the page's store, as a model by link is: the same link in a fresh
    // page of this browser reads them from there, and asks the Hub only to resolve each branch.
    await p.waitForFunction(() => document.querySelector('#stored-models')?.dataset.pending === '0', null, { timeout: 60000 });
    const before = await imitation.served();
    expect(before.bytes > 2 * 36769, `both revisions were fetched: ${before.bytes} bytes`);
    const q = await linkContext.newPage();
    q.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    await q.goto(p.url());
    await q.waitForFunction(() => document.querySelectorAll('#timeline-table tbody tr').length === 3, null, { timeout: 120000 });
    await idle(q);
    const again = await tableRows(q);
    const after = await imitation.served();
    expect(after.bytes - before.bytes < 4000, `the revisions came from the store: ${after.bytes - before.bytes} bytes served`);
    expect(JSON.stringify(again) === JSON.stringify(rows), `the same table: ${JSON.stringify(again)}`);
    await linkContext.close();
  } finally {
    imitation.child.kill();
  }
});

await test('a model by link opens from the Hub, pins its commit in the share link, and gives the local numbers', async () => {
  // The tests' Hub and CDN (tests/hub_imitation), built by `cargo test` as an example.
  const imitation = await hubImitation(root, ['--repo', `test-org/gpt2=${path.join(fixtures, 'gpt2')}`,
    '--repo', `test-org/llama=${path.join(fixtures, 'llama')}`]);
  const { served } = imitation;
  // The page's writes to its store have ended and the list names the model.
  const stored = (p, name) => p.waitForFunction((name) => {
    const list = document.querySelector('#stored-models');
    return list?.dataset.pending === '0' && [...list.querySelectorAll('.stored-name')].some((n) => n.textContent === name);
  }, name, { timeout: 60000 });
  try {
    const { addresses } = imitation;
    const commit = addresses.commits['test-org/gpt2@main'];
    // A context of its own: these requests go to the imitation's origins, on purpose.
    const linkContext = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true, serviceWorkers: 'block' });
    const p = await linkContext.newPage();
    p.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    const hub = encodeURIComponent(addresses.hub);
    await p.goto(`${origin}/#hub=${hub}`);
    await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
    await idle(p);
    await p.fill('#model-link', 'hf:test-org/gpt2');
    await p.click('#open-link');
    const pinned = `hf:test-org/gpt2@${commit}`;
    await p.waitForFunction((name) => (document.querySelector('#model-name')?.textContent ?? '').trim() === name, pinned, { timeout: 60000 });
    expect(p.url().includes(`model=${encodeURIComponent(pinned)}`), `the share link names the commit: ${p.url()}`);
    await idle(p);
    const byLink = JSON.parse((await download(p, '#export-json')).bytes.toString());
    const fetched = byLink.model_link?.bytes_fetched;
    // Each worker of the pool fetches what it reads (the small files and headers each): the sum
    // can pass the files' size on a model this small.
    expect(byLink.model_link?.pinned === pinned && fetched > 0 && byLink.model_link.bytes_total === 36769,
      `the export records the link and its bytes: ${JSON.stringify(byLink.model_link)}`);
    const line = await p.textContent('#model-hash');
    expect(/from the Hub, pinned to its commit: [\d.]+ kB fetched of 36\.8 kB/.test(line), `the model line: ${line}`);
    const link = p.url();
    // The same model from its files (gpt2FixtureExport's wait would pass at once: the model by
    // link is a GPT-2 of the same shape).
    await p.setInputFiles('#file-input', ['config.json', 'tokenizer.json', 'model.safetensors'].map((f) => path.join(fixtures, 'gpt2', f)));
    await p.waitForFunction((name) => !['', name].includes((document.querySelector('#model-name')?.textContent ?? '').trim()), pinned, { timeout: 60000 });
    await idle(p);
    const byFiles = JSON.parse((await download(p, '#export-json')).bytes.toString());
    expect(JSON.stringify(byLink.folded.heads) === JSON.stringify(byFiles.folded.heads), 'the same numbers as the local files, bit for bit');
    // A sharded Llama-shaped model (an index and four shards) by link, and from its files.
    const llama = `hf:test-org/llama@${addresses.commits['test-org/llama@main']}`;
    await p.fill('#model-link', 'hf:test-org/llama');
    await p.click('#open-link');
    await p.waitForFunction((name) => (document.querySelector('#model-name')?.textContent ?? '').trim() === name, llama, { timeout: 60000 });
    await idle(p);
    const llamaByLink = JSON.parse((await download(p, '#export-json')).bytes.toString());
    const llamaFiles = fs.readdirSync(path.join(fixtures, 'llama')).filter((f) => f !== 'expected.json').map((f) => path.join(fixtures, 'llama', f));
    await p.setInputFiles('#file-input', llamaFiles);
    await p.waitForFunction((name) => !['', name].includes((document.querySelector('#model-name')?.textContent ?? '').trim()), llama, { timeout: 60000 });
    await idle(p);
    const llamaByFiles = JSON.parse((await download(p, '#export-json')).bytes.toString());
    expect(llamaByLink.folded.heads.length > 0 && JSON.stringify(llamaByLink.folded.heads) === JSON.stringify(llamaByFiles.folded.heads),
      'the sharded model by link gives its files\' numbers, bit for bit');
    const probed = (json) => json.induction?.uniform_random?.report?.Ok?.sequences;
    expect(probed(llamaByLink)?.length > 0 && JSON.stringify(llamaByLink.induction.uniform_random) === JSON.stringify(llamaByFiles.induction.uniform_random),
      `and its probe's: ${JSON.stringify(llamaByLink.induction?.uniform_random)?.slice(0, 200)}`);
    // What the workers fetched is kept: the share link opens the same model, pinned, in a
    // fresh page (no demo first), and fetches nothing.
    await stored(p, pinned);
    const before = await served();
    const q = await linkContext.newPage();
    await q.goto(link);
    await q.waitForFunction((name) => (document.querySelector('#model-name')?.textContent ?? '').trim() === name, pinned, { timeout: 60000 });
    await q.waitForSelector('#head-grid .cell', { timeout: 60000 });
    await idle(q);
    const after = await served();
    expect(after.bytes === before.bytes && after.requests === before.requests,
      `a reopen asks the server for nothing: ${JSON.stringify(before)} then ${JSON.stringify(after)}`);
    const reopened = await q.textContent('#model-hash');
    expect(/pinned to its commit: 0\.0 kB fetched of 36\.8 kB/.test(reopened), `the model line: ${reopened}`);
    const fromStore = JSON.parse((await download(q, '#export-json')).bytes.toString());
    expect(JSON.stringify(fromStore.folded.heads) === JSON.stringify(byFiles.folded.heads), 'the stored bytes give the same numbers');
    await q.click('#stored-models summary');
    const listed = await q.textContent('#stored-models');
    expect(/Stored models: 2 \([\d.]+ kB\)/.test(listed) && listed.includes(pinned) && listed.includes(llama), `the list: ${listed}`);
    await shot('model-by-link', false, q);
    // A link to nothing: one line, and the model on screen stays.
    await q.fill('#model-link', 'hf:test-org/missing');
    await q.click('#open-link');
    await q.waitForSelector('#load-error', { timeout: 60000 });
    const error = (await q.textContent('#load-error')).trim();
    expect(/not found on the server \(no such repository/.test(error), `the error line: ${error}`);
    expect((await q.textContent('#model-name')).trim() === pinned, 'the shown model stays');
    // Offline, with the app from the service worker: the pinned link, and the branch it was
    // pinned from, open from the store.
    const offlineContext = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
    try {
      const o = await offlineContext.newPage();
      o.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
      await o.goto(`${origin}/#hub=${hub}`);
      await o.waitForSelector('#head-grid .cell', { timeout: 60000 });
      await idle(o);
      await o.fill('#model-link', 'hf:test-org/gpt2');
      await o.click('#open-link');
      await o.waitForFunction((name) => (document.querySelector('#model-name')?.textContent ?? '').trim() === name, pinned, { timeout: 60000 });
      await idle(o);
      await o.waitForFunction(() => navigator.serviceWorker.controller !== null, null, { timeout: 30000 });
      await stored(o, pinned);
      await offlineContext.setOffline(true);
      await o.reload();
      await o.waitForFunction((name) => (document.querySelector('#model-name')?.textContent ?? '').trim() === name, pinned, { timeout: 60000 });
      await o.waitForSelector('#head-grid .cell', { timeout: 60000 });
      const offlineLine = await o.textContent('#model-hash');
      expect(/0\.0 kB fetched of 36\.8 kB/.test(offlineLine), `offline, nothing fetched: ${offlineLine}`);
      await idle(o);
      await o.fill('#model-link', 'hf:test-org/gpt2');
      await o.click('#open-link');
      await o.waitForFunction(() => document.querySelector('#load-error') || document.querySelector('#busy')?.textContent === '', null, { timeout: 60000 });
      await idle(o);
      expect(await o.locator('#load-error').count() === 0, `the branch opens offline: ${await o.locator('#load-error').allTextContents()}`);
      expect((await o.textContent('#model-name')).trim() === pinned, 'the branch opens its stored commit');
      // A link whose bytes are not stored says so offline; the model shown stays.
      await o.fill('#model-link', 'hf:test-org/other');
      await o.click('#open-link');
      await o.waitForSelector('#load-error', { timeout: 60000 });
      const missing = (await o.textContent('#load-error')).trim();
      expect(/offline/i.test(missing), `offline and not stored: ${missing}`);
      expect((await o.textContent('#model-name')).trim() === pinned, 'the shown model stays');
      await shot('model-by-link-offline', false, o);
    } finally {
      await offlineContext.close();
    }
    // A full store is one line; the model still opens, from the network. (The quota is forced
    // small for writes only: the line's figures are the browser's estimate, the real quota.)
    const fullContext = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true, serviceWorkers: 'block' });
    try {
      const f = await fullContext.newPage();
      f.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
      const cdp = await fullContext.newCDPSession(f);
      await cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: 8192 });
      await f.goto(link);
      await f.waitForFunction((name) => (document.querySelector('#model-name')?.textContent ?? '').trim() === name, pinned, { timeout: 60000 });
      await f.waitForSelector('#stored-full', { timeout: 60000 });
      const full = (await f.textContent('#stored-full')).trim();
      expect(/storage for this page is full \(.* used of the .* it allows this site\)/.test(full), `the full store's line: ${full}`);
      expect(await f.locator('#load-error').count() === 0, 'no error: the model runs from the network');
      await shot('stored-full', false, f);
    } finally {
      await fullContext.close();
    }
    // Removing a stored model takes it off the list; removing the last hides the list.
    await q.click(`#stored-models li:has-text("${llama}") .remove-stored`);
    await q.waitForFunction(() => document.querySelectorAll('#stored-models li').length === 1, null, { timeout: 30000 });
    expect((await q.textContent('#stored-models li')).includes(pinned), 'the other model stays stored');
    await q.click('#stored-models .remove-stored');
    await q.waitForFunction(() => !document.querySelector('#stored-models'), null, { timeout: 30000 });
    // The classroom recipe: a model folder copied beside the page, named relative to it, under
    // a static host's sub-path.
    const folder = path.join(dist, 'course', 'gpt2');
    fs.mkdirSync(folder, { recursive: true });
    for (const f of ['config.json', 'tokenizer.json', 'model.safetensors']) fs.copyFileSync(path.join(fixtures, 'gpt2', f), path.join(folder, f));
    try {
      const classroom = await linkContext.newPage();
      await classroom.goto(`${origin}${SUB_PATH}#model=url:course/gpt2/&tab=head&head=L1H0`);
      await classroom.waitForFunction(() => (document.querySelector('#model-name')?.textContent ?? '').trim() === 'url:course/gpt2/', null, { timeout: 60000 });
      await classroom.waitForSelector('#tab-head[aria-selected="true"]');
      expect(/head=L1H0/.test(classroom.url()), `the linked head is shown: ${classroom.url()}`);
      await idle(classroom);
      await classroom.click('#tab-overview');
      const fromFolder = JSON.parse((await download(classroom, '#export-json')).bytes.toString());
      expect(JSON.stringify(fromFolder.folded.heads) === JSON.stringify(byFiles.folded.heads), 'the folder beside the page gives the same numbers');
    } finally {
      fs.rmSync(path.join(dist, 'course'), { recursive: true, force: true });
    }
    await linkContext.close();
  } finally {
    imitation.child.kill();
  }
});

await test('the newer families load through the file input with their references\' numbers', async () => {
  // Gemma 2 (sandwich norms, soft-caps, windows), Falcon with ALiBi, Mixtral (experts, window):
  // the grid fills and every head's folded copying scores are the float64 references'.
  const p = await context.newPage();
  watch(p);
  await p.goto(origin + '/#model=demo');
  await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
  for (const [name, family] of [['gemma2', 'gemma2'], ['falcon-rw', 'falcon'], ['mixtral', 'mixtral']]) {
    const folder = path.join(fixtures, 'families', name);
    await p.setInputFiles('#file-input', ['config.json', 'model.safetensors'].map((f) => path.join(folder, f)));
    await p.waitForFunction((family) => new RegExp(`${family} · 4 layers × 4 heads`).test(document.querySelector('#model-info')?.textContent ?? ''), family, { timeout: 60000 });
    await idle(p);
    expect(await p.locator('#head-grid .cell').count() === 16, `${name}: sixteen heads`);
    const exported = JSON.parse((await download(p, '#export-json')).bytes.toString());
    const reference = JSON.parse(fs.readFileSync(path.join(folder, 'expected.json'), 'utf8'));
    for (const [i, want] of reference.folded.heads.entries()) {
      const got = exported.folded.heads[i];
      for (const circuit of ['qk', 'qk_token', 'ov', 'ov_residual']) {
        const [g, w] = [got[circuit].copying_score, want[circuit].copying_score];
        expect(Math.abs(g - w) <= 1e-4 * Math.max(1e-2, Math.abs(w)), `${name} L${want.layer}H${want.head} ${circuit}: ${g} | ${w}`);
      }
    }
    if (name === 'gemma2') await shot('loaded-gemma2', false, p);
  }
  await p.close();
});

await test('a model by link survives transient statuses and a stalled connection, with the local numbers', async () => {
  const imitation = await hubImitation(root, ['--repo', `test-org/gpt2=${path.join(fixtures, 'gpt2')}`]);
  try {
    const { addresses, faults } = imitation;
    // Every third request for a byte range answers 503, and the first range's answer stalls
    // halfway: the worker's request for it times out (20 s) and is asked again.
    await faults({ transient_every: 3, transient_status: 503, stalls: 1 });
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true, serviceWorkers: 'block' });
    const p = await context.newPage();
    p.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    await p.goto(`${origin}/#hub=${encodeURIComponent(addresses.hub)}`);
    await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
    await idle(p);
    await p.fill('#model-link', 'hf:test-org/gpt2');
    await p.click('#open-link');
    // The stall is said while the load waits it out, never silently.
    await p.waitForSelector('#stalled', { timeout: 60000 });
    const note = (await p.textContent('#stalled')).trim();
    expect(/^The connection stalled: no answer within \d+ s from 127\.0\.0\.1:\d+; asked again for what was missing\.$/.test(note), `the note: ${note}`);
    const pinned = `hf:test-org/gpt2@${addresses.commits['test-org/gpt2@main']}`;
    await p.waitForFunction((name) => (document.querySelector('#model-name')?.textContent ?? '').trim() === name, pinned, { timeout: 90000 });
    await idle(p);
    const byLink = JSON.parse((await download(p, '#export-json')).bytes.toString());
    await p.setInputFiles('#file-input', ['config.json', 'tokenizer.json', 'model.safetensors'].map((f) => path.join(fixtures, 'gpt2', f)));
    await p.waitForFunction((name) => !['', name].includes((document.querySelector('#model-name')?.textContent ?? '').trim()), pinned, { timeout: 60000 });
    await idle(p);
    const byFiles = JSON.parse((await download(p, '#export-json')).bytes.toString());
    expect(byLink.folded.heads.length > 0 && JSON.stringify(byLink.folded.heads) === JSON.stringify(byFiles.folded.heads),
      'through the faults, the local files\' numbers, bit for bit');
    expect(byLink.induction?.uniform_random && JSON.stringify(byLink.induction.uniform_random) === JSON.stringify(byFiles.induction?.uniform_random), 'and the probe\'s');
    await context.close();
  } finally {
    imitation.child.kill();
  }
});

await test('nothing leaves the page origin and nothing went wrong', async () => {
  const foreign = requests.filter((u) => !u.startsWith(origin) && !u.startsWith('data:') && !u.startsWith('blob:'));
  expect(foreign.length === 0, `foreign requests: ${foreign.join(', ')}`);
  expect(requests.some((u) => u.endsWith('/worker.js')), 'the worker was seen');
  expect(problems.length === 0, problems.join('; '));
});

await browser.close();
server.close();
const failed = results.filter((r) => !r.ok);
console.log(`demo model: ${demoName}`);
console.log(`e2e: ${results.length - failed.length} passed, ${failed.length} failed`);
process.exit(failed.length ? 1 : 0);
