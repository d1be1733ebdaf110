// Scratch: where do long frames come from during a long load? (not part of the suite)
import { chromium } from 'playwright-core';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
const dist = path.resolve('dist');
const server = http.createServer((req, res) => {
  let file = path.join(dist, decodeURIComponent(new URL(req.url, 'http://x').pathname));
  if (fs.statSync(file, { throwIfNoEntry: false })?.isDirectory()) file = path.join(file, 'index.html');
  if (!fs.existsSync(file)) { res.writeHead(404).end(); return; }
  const type = { '.js': 'text/javascript', '.wasm': 'application/wasm', '.html': 'text/html', '.css': 'text/css' }[path.extname(file)] ?? 'application/octet-stream';
  res.writeHead(200, { 'content-type': type }); fs.createReadStream(file).pipe(res);
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await page.goto(`http://127.0.0.1:${server.address().port}/`);
await page.waitForSelector('#head-grid .cell', { timeout: 60000 });
await page.waitForTimeout(1500);
if (process.argv[3]) await page.click(process.argv[3]);
await page.evaluate(() => {
  window.__loaf = []; window.__gaps = [];
  const t0 = performance.now(); window.__t0 = t0;
  let last = t0;
  const tick = (t) => { if (t - last > 50) window.__gaps.push([Math.round(last - t0), Math.round(t - last)]); last = t; requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
  new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__loaf.push({ at: Math.round(e.startTime - t0), dur: Math.round(e.duration), block: Math.round(e.blockingDuration), render: Math.round(e.renderStart ? e.renderStart - e.startTime : -1), layout: Math.round(e.styleAndLayoutStart ? e.styleAndLayoutStart - e.startTime : -1), scripts: e.scripts.map((s) => `${s.invoker}|${s.sourceFunctionName}|${Math.round(s.duration)}ms|fwd${Math.round(s.forcedStyleAndLayoutDuration)}`) }); }).observe({ type: 'long-animation-frame' });
  const busy = document.querySelector('#busy'); window.__stages = [];
  new MutationObserver(() => { const t = (busy.textContent || '').replace(/\d+%/g, ''); if (window.__stages.at(-1)?.[1] !== t) window.__stages.push([Math.round(performance.now() - t0), t.slice(0, 60)]); }).observe(busy, { subtree: true, childList: true, characterData: true });
});
await page.setInputFiles('#file-input', process.argv[2]);
await page.waitForFunction(() => /stages/.test(document.querySelector('#model-name')?.textContent ?? '') && !(document.querySelector('#busy')?.textContent ?? '').trim(), null, { timeout: 300000 });
await page.waitForTimeout(500);
console.log(JSON.stringify(await page.evaluate(() => ({ loaf: window.__loaf, gaps: window.__gaps, stages: window.__stages })), null, 1));
await browser.close(); server.close();
