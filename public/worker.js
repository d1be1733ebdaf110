// The analysis worker (a module worker). It runs the page's own wasm: the page posts its
// already compiled WebAssembly.Module first (so the worker does not compile 4 MB again), then
// requests, which wait in a queue while the wasm starts. See crates/web/src/worker_host.rs (this
// worker's browser side) and crates/core/src/worker/ (what it answers).
import init, { worker_main } from './headprint-web.js';

const waiting = [];
let started = false;
self.onmessage = (event) => {
  if (started || !(event.data && event.data.module)) {
    waiting.push(event);
    return;
  }
  started = true;
  init({ module_or_path: event.data.module })
    .then(() => {
      worker_main();
      for (const queued of waiting) self.onmessage(queued);
    })
    // The page sees this as the worker's error event and reports it.
    .catch((error) => setTimeout(() => { throw error; }));
};
