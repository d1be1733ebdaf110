// The page's longest frames during a long load: serves dist/, opens the page, loads a random
// gpt.py-layout model whose every stage takes a while (4 layers x 6 heads, d 384, vocab 8192:
// 54 MB) and prints each stage's start, every gap of over 50 ms between animation frames and every
// long animation frame (Long Animation Frames API) with its scripts.
//
//   node scripts/frames.mjs [TAB_SELECTOR]      (after trunk build; e.g. '#tab-probes')
import fs from 'node:fs';
import path from 'node:path';
import { bigModel, launchChromium, serveDist } from '../tests/e2e/harness.mjs';
const dist = path.resolve('dist');
const model = path.join(fs.mkdtempSync('/tmp/headprint-frames-'), 'stages.safetensors');
bigModel(model, { layers: 4, heads: 6, d: 384, vocab: 8192, context: 256, random: true });
const { server, origin } = await serveDist(dist);
const browser = await launchChromium();
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await page.goto(`${origin}/`);
await page.waitForSelector('#head-grid .cell', { timeout: 60000 });
await page.waitForTimeout(1500);
if (process.argv[2]) await page.click(process.argv[2]);
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
await page.setInputFiles('#file-input', model);
await page.waitForFunction(() => /stages/.test(document.querySelector('#model-name')?.textContent ?? '') && !(document.querySelector('#busy')?.textContent ?? '').trim(), null, { timeout: 300000 });
await page.waitForTimeout(500);
console.log(JSON.stringify(await page.evaluate(() => ({ loaf: window.__loaf, gaps: window.__gaps, stages: window.__stages })), null, 1));
await browser.close(); server.close();

