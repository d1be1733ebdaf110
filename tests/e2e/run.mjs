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
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  let file = path.join(dist, decodeURIComponent(url.pathname));
  if (!file.startsWith(dist)) { res.writeHead(403).end(); return; }
  if (fs.existsSync(file) && fs.statSync(file).isDirectory()) file = path.join(file, 'index.html');
  if (!fs.existsSync(file)) { res.writeHead(404).end('not found'); return; }
  res.writeHead(200, { 'content-type': types[path.extname(file)] ?? 'application/octet-stream' });
  fs.createReadStream(file).pipe(res);
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const origin = `http://127.0.0.1:${server.address().port}`;

const browser = await chromium.launch({
  executablePath: chromiumPath,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const requests = [];
const problems = [];
page.on('request', (r) => requests.push(r.url()));
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });

const results = [];
async function test(name, body) {
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
const shot = (name, fullPage = false) => page.screenshot({ path: path.join(shots, `${name}.png`), fullPage });
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

await test('metric choice recolours the grid', async () => {
  const before = await page.getAttribute('#cell-L0H0', 'data-value');
  await page.selectOption('#metric-select', 'induction');
  await page.waitForFunction((b) => document.querySelector('#cell-L0H0')?.dataset.value !== b, before);
  await page.selectOption('#metric-select', 'ov-copying');
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
  await page.click('#cell-L0H0');
  await page.waitForSelector('#qk-plane circle.eig');
  expect(await page.locator('#qk-plane circle.eig').count() > 0, 'QK eigenvalues');
  expect(await page.locator('#ov-plane circle.eig').count() > 0, 'OV eigenvalues');
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

await test('a probe runs and its verdict table appears', async () => {
  await page.click('#tab-probes');
  await page.fill('#prompt-input', '(a(b)c) (a(b)c)');
  await page.click('#run-prompt');
  await page.waitForSelector('#prompt-heatmap svg rect');
  expect(await page.locator('#prompt-heatmap rect.induction-cell').count() > 0, 'induction cells marked');
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

await test('nothing leaves the page origin and nothing went wrong', async () => {
  const foreign = requests.filter((u) => !u.startsWith(origin) && !u.startsWith('data:') && !u.startsWith('blob:'));
  expect(foreign.length === 0, `foreign requests: ${foreign.join(', ')}`);
  expect(problems.length === 0, problems.join('; '));
});

await browser.close();
server.close();
const failed = results.filter((r) => !r.ok);
console.log(`demo model: ${demoName}`);
console.log(`e2e: ${results.length - failed.length} passed, ${failed.length} failed`);
process.exit(failed.length ? 1 : 0);
