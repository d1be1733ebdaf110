// Firefox check, run by scripts/e2e.sh where Debian's firefox-esr is installed: the built
// page's wasm (SIMD, no relaxed SIMD) loads in Firefox, the pool of module workers starts, and
// the demo grid renders with every head. Then a model by link, from the tests' Hub imitation
// (target/release/examples/hub_imitation): `hf:test-org/gpt2` opens, pinned to its commit, and
// says what it fetched; once the page's store (IndexedDB) has its bytes, the share link opens it
// again in a new page from the store, asking the server for nothing. Drives firefox-esr with
// puppeteer-core (a dev dependency) over WebDriver BiDi. Usage:
//   apt-get install firefox-esr; npm ci; node tests/e2e/firefox.mjs [dist]
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { hubImitation, serveDist } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.join(here, '../..');
const dist = path.resolve(process.argv[2] ?? path.join(root, 'dist'));
const puppeteer = (await import(process.env.PUPPETEER_CORE ?? 'puppeteer-core')).default;
const { server, origin } = await serveDist(dist);
const browser = await puppeteer.launch({
  browser: 'firefox',
  executablePath: process.env.FIREFOX ?? '/usr/bin/firefox-esr',
  headless: true,
});
const errors = [];
/// A new page of `context` whose errors are kept.
async function newPage(context) {
  const page = await context.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on('pageerror', (e) => errors.push(String(e.message ?? e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  return page;
}
const since = (started) => ((Date.now() - started) / 1000).toFixed(1);
/// The page's busy line is empty: nothing is being computed.
const idle = (p) => p.waitForFunction(() => !(document.querySelector('#busy')?.textContent ?? '').trim(), { timeout: 60000 });
/// `#model-name` reads `name`.
const named = (p, name) => p.waitForFunction((name) => (document.querySelector('#model-name')?.textContent ?? '').trim() === name,
  { timeout: 60000 }, name);
/// The page's writes to its store have ended and the list names the model.
const stored = (p, name) => p.waitForFunction((name) => {
  const list = document.querySelector('#stored-models');
  return list?.dataset.pending === '0' && [...list.querySelectorAll('.stored-name')].some((n) => n.textContent === name);
}, { timeout: 60000 }, name);
const text = (p, selector) => p.$eval(selector, (e) => e.textContent.trim());

let imitation;
try {
  const page = await newPage(browser);
  const started = Date.now();
  await page.goto(origin + '/');
  await page.waitForSelector('#head-grid .cell', { timeout: 180000 });
  const seconds = since(started);
  const cells = await page.$$eval('#head-grid .cell', (c) => c.length);
  const info = await text(page, '#model-info');
  const memory = await text(page, '#worker-memory');
  const version = await browser.version();
  await page.screenshot({ path: path.join(here, 'screenshots/firefox-demo.png') });
  console.log(`${version}: demo grid with ${cells} heads after ${seconds} s; ${info}; ${memory}`);
  const layersHeads = /(\d+) layers × (\d+) heads/.exec(info);
  if (!layersHeads || cells < +layersHeads[1] * +layersHeads[2]) throw new Error(`the grid has ${cells} cells for "${info}"`);
  if (errors.length) throw new Error(`errors on the page: ${errors.join(' | ')}`);

  // A model by link, from the tests' Hub imitation.
  imitation = await hubImitation(root, ['--repo', `test-org/gpt2=${path.join(root, 'tests/fixtures/gpt2')}`]);
  const { addresses } = imitation;
  const commit = addresses.commits['test-org/gpt2@main'];
  const pinned = `hf:test-org/gpt2@${commit}`;
  // A context of its own: a store (IndexedDB) with nothing in it yet.
  const context = await browser.createBrowserContext();
  const p = await newPage(context);
  await p.goto(`${origin}/#hub=${encodeURIComponent(addresses.hub)}`);
  await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
  await idle(p);
  await p.type('#model-link', 'hf:test-org/gpt2');
  const opening = Date.now();
  await p.click('#open-link');
  await named(p, pinned);
  await p.waitForSelector('#head-grid .cell', { timeout: 60000 });
  const line = await text(p, '#model-hash');
  console.log(`by link: ${pinned} after ${since(opening)} s; ${line}`);
  if (!/from the Hub, pinned to its commit: [\d.]+ kB fetched of 36\.8 kB/.test(line)) throw new Error(`the model line: ${line}`);
  if (!p.url().includes(`model=${encodeURIComponent(pinned)}`)) throw new Error(`the share link names the commit: ${p.url()}`);
  await idle(p);
  // What was fetched is kept: the share link opens the same model in a new page from the store.
  const storing = Date.now();
  await stored(p, pinned);
  const before = await imitation.served();
  console.log(`stored after ${since(storing)} s more; the imitation served ${before.bytes} bytes in ${before.requests} requests`);
  const q = await newPage(context);
  const reopening = Date.now();
  await q.goto(p.url());
  await named(q, pinned);
  await q.waitForSelector('#head-grid .cell', { timeout: 60000 });
  await idle(q);
  const after = await imitation.served();
  const reopened = await text(q, '#model-hash');
  console.log(`reopened after ${since(reopening)} s; the imitation served ${after.bytes} bytes in ${after.requests} requests; ${reopened}`);
  if (after.bytes !== before.bytes || after.requests !== before.requests) {
    throw new Error(`a reopen asks the server for nothing: ${JSON.stringify(before)} then ${JSON.stringify(after)}`);
  }
  if (!/pinned to its commit: 0\.0 kB fetched of 36\.8 kB/.test(reopened)) throw new Error(`the reopened model line: ${reopened}`);
  await q.click('#stored-models summary');
  const listed = await text(q, '#stored-models');
  if (!/Stored models: 1 \([\d.]+ kB\)/.test(listed) || !listed.includes(pinned)) throw new Error(`the list: ${listed}`);
  await q.screenshot({ path: path.join(here, 'screenshots/firefox-model-by-link.png') });
  if (errors.length) throw new Error(`errors on the page: ${errors.join(' | ')}`);
} finally {
  imitation?.child.kill();
  await browser.close();
  server.close();
}
