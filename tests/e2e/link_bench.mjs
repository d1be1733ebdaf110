// Models by link in the tab (a measurement, not a test): a random GPT-2 Small in the Hub's
// exact layout (`examples/hub_imitation --gpt2-small`: f32, the 12 causal masks stored, 548 MB)
// opened by link in headless Chromium, as a user opens `hf:openai-community/gpt2`. Reports the
// time and the bytes the server sent until every head is fingerprinted and until the overview
// with the induction probe is shown, then the same link opened again in a fresh page, from the
// page's store. On the first open it checks that each byte was fetched about once: until every
// head is fingerprinted, at most the tensors the fingerprint reads; until the overview, at most
// the file; each with 1 MB for the small files and headers each worker fetches. It exits
// non-zero, after the table, when a bound is passed.
// Usage: node tests/e2e/link_bench.mjs [dist-dir]  (after scripts/build-page.sh and
// `cargo build --release --example hub_imitation`) -> prints a Markdown table.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { hubImitation, launchChromium, serveDist } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const dist = path.resolve(process.argv[2] ?? path.join(root, 'dist'));
const limit = 1_500_000;

const imitation = await hubImitation(root, ['--gpt2-small', 'bench/gpt2=main']);
const { addresses, served } = imitation;
const { server, origin } = await serveDist(dist);
const browser = await launchChromium();
const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, serviceWorkers: 'block' });
const size = (bytes) => (bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`);
const rows = [];
try {
  for (const visit of ['first open', 'second open, from the page\'s store']) {
    const page = await context.newPage();
    page.on('pageerror', (e) => console.error(`page error: ${e.message}`));
    await page.goto(`${origin}/#hub=${encodeURIComponent(addresses.hub)}`);
    await page.waitForSelector('#head-grid .cell', { timeout: 60000 });
    await page.waitForFunction(() => (document.querySelector('#busy')?.textContent ?? '') === '', null, { timeout: 60000 });
    const start = await served();
    // The bytes sent are asked for the moment the page names the probe, before its first read.
    let headsServed;
    await page.exposeFunction(`headsDone${rows.length}`, async () => { headsServed = served(); });
    await page.evaluate((mark) => {
      window.loadStarted = performance.now();
      const busy = document.querySelector('#busy');
      new MutationObserver(() => {
        if (!window.headsDone && /Running the induction probe/.test(busy.textContent ?? '')) {
          window.headsDone = performance.now() - window.loadStarted;
          window[mark]();
        }
      }).observe(busy, { subtree: true, childList: true, characterData: true });
    }, `headsDone${rows.length}`);
    await page.fill('#model-link', 'hf:bench/gpt2');
    await page.click('#open-link');
    await page.waitForFunction(() => window.headsDone, null, { timeout: limit });
    while (!headsServed) await new Promise((ok) => setTimeout(ok, 10));
    const atHeads = await headsServed;
    const headsWall = await page.evaluate(() => window.headsDone);
    console.error(`${visit}: every head fingerprinted in ${(headsWall / 1000).toFixed(1)} s, ${size(atHeads.bytes - start.bytes)} sent`);
    await page.waitForFunction(() => /12 layers × 12 heads/.test(document.querySelector('#model-info')?.textContent ?? ''), null, { timeout: limit });
    const overviewWall = await page.evaluate(() => performance.now() - window.loadStarted);
    const atOverview = await served();
    const line = (await page.textContent('#model-hash')).trim();
    console.error(`${visit}: overview in ${(overviewWall / 1000).toFixed(1)} s, ${size(atOverview.bytes - start.bytes)} sent; the page says: ${line}`);
    rows.push({ visit, headsWall, headsBytes: atHeads.bytes - start.bytes, overviewWall, overviewBytes: atOverview.bytes - start.bytes, line });
    // The page's writes to its store end before the next visit reads it.
    await page.waitForFunction(() => document.querySelector('#stored-models')?.dataset.pending === '0', null, { timeout: limit });
    await page.close();
  }
} finally {
  await browser.close();
  server.close();
  imitation.child.kill();
}
// GPT-2 Small's embeddings, attention weights and biases and norms, f32 (what `hub.rs`'s
// `gpt2_small_in_its_real_shape_fingerprints_from_the_hub_within_280_mb` counts), and its file.
const fingerprintReads = 4 * (50257 * 768 + 1024 * 768 + 2 * 768 + 12 * (4 * 768 + 768 * 2304 + 2304 + 768 * 768 + 768));
const fileBytes = 548_105_232;
const perWorker = 1e6;
const first = rows[0];
const overBounds = [];
if (first.headsBytes > fingerprintReads + perWorker) overBounds.push(`every head fingerprinted after ${size(first.headsBytes)}, above ${size(fingerprintReads)} read`);
if (first.overviewBytes > fileBytes + perWorker) overBounds.push(`the overview after ${size(first.overviewBytes)}, above the ${size(fileBytes)} file`);
console.log('| visit | every head fingerprinted | bytes sent by then | overview with the induction probe | bytes sent by then |');
console.log('|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.visit} | ${(r.headsWall / 1000).toFixed(1)} s | ${size(r.headsBytes)} | ${(r.overviewWall / 1000).toFixed(1)} s | ${size(r.overviewBytes)} |`);
}
if (overBounds.length) {
  console.error(`fetched more than once: ${overBounds.join('; ')}`);
  process.exit(1);
}
