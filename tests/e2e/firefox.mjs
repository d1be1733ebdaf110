// Firefox check (a script, not in CI: Firefox is not on the CI machine): the built page's wasm
// (SIMD, no relaxed SIMD) loads in Firefox, the pool of module workers starts, and the demo
// grid renders with every head. Drives Debian's firefox-esr with puppeteer-core over WebDriver
// BiDi. Usage:
//   apt-get install firefox-esr; npm install --prefix /tmp/pptr puppeteer-core@24
//   PUPPETEER_CORE=/tmp/pptr/node_modules/puppeteer-core/lib/esm/puppeteer/puppeteer-core.js \
//     node tests/e2e/firefox.mjs [dist]
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { serveDist } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.resolve(process.argv[2] ?? path.join(here, '../../dist'));
const puppeteer = (await import(process.env.PUPPETEER_CORE ?? 'puppeteer-core')).default;
const { server, origin } = await serveDist(dist);
const browser = await puppeteer.launch({
  browser: 'firefox',
  executablePath: process.env.FIREFOX ?? '/usr/bin/firefox-esr',
  headless: true,
});
const errors = [];
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on('pageerror', (e) => errors.push(String(e.message ?? e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  const started = Date.now();
  await page.goto(origin + '/');
  await page.waitForSelector('#head-grid .cell', { timeout: 180000 });
  const seconds = (Date.now() - started) / 1000;
  const cells = await page.$$eval('#head-grid .cell', (c) => c.length);
  const info = await page.$eval('#model-info', (e) => e.textContent);
  const memory = await page.$eval('#worker-memory', (e) => e.textContent);
  const version = await browser.version();
  await page.screenshot({ path: path.join(here, 'screenshots/firefox-demo.png') });
  console.log(`${version}: demo grid with ${cells} heads after ${seconds.toFixed(1)} s; ${info.trim()}; ${memory.trim()}`);
  const layersHeads = /(\d+) layers × (\d+) heads/.exec(info);
  if (!layersHeads || cells < +layersHeads[1] * +layersHeads[2]) throw new Error(`the grid has ${cells} cells for "${info}"`);
  if (errors.length) throw new Error(`errors on the page: ${errors.join(' | ')}`);
} finally {
  await browser.close();
  server.close();
}
