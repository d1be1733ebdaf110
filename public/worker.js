// The analysis worker (a module worker). It runs the page's own wasm (the same file, so the
// browser's cache serves it) and hands every message to it; messages that arrive while the
// wasm starts wait in a queue. See src/worker/.
import init, { worker_main } from './headprint.js';

const waiting = [];
self.onmessage = (event) => waiting.push(event);
try {
  await init();
  worker_main();
  for (const event of waiting) self.onmessage(event);
} catch (error) {
  // The page sees this as the worker's error event and reports it.
  setTimeout(() => { throw error; });
}
