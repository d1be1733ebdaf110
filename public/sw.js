// headprint's service worker: after one visit the page, the demo model, the suites and the
// held-out text work offline. Network first, the cache as the fallback: online, every file is the
// server's newest, so a new version of the page replaces the cached one on its first online
// visit, and the page is told (it says so); offline, the last cached copy serves. Only this
// origin's GET requests are handled; local model files never pass through here (they are read
// in the tab, not fetched).
const CACHE = 'headprint';
const APP = [
  './', 'index.html', 'headprint-web.js', 'headprint-web_bg.wasm', 'worker.js', 'main.css',
  'models/nietzsche-char.safetensors', 'texts/nietzsche-heldout.txt',
  'suites/quote.json', 'suites/bracket.json', 'suites/swap.json', 'suites/exercises-demo.json',
];
// The compiled app: a change here is a new version of the page.
const VERSIONED = ['headprint-web_bg.wasm', 'headprint-web.js'];

self.addEventListener('install', (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(APP)).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('fetch', (event) => {
  const { request } = event;
  if (request.method !== 'GET' || new URL(request.url).origin !== self.location.origin) return;
  event.respondWith(networkThenCache(request, event.clientId));
});

async function networkThenCache(request, clientId) {
  const cache = await caches.open(CACHE);
  let response;
  try {
    // The browser's HTTP cache may call a file fresh on a heuristic (a tenth of its age) and
    // answer without asking the server: a new build would then go unnoticed. Revalidate.
    response = await fetch(request.mode === 'navigate' ? request : new Request(request, { cache: 'no-cache' }));
  } catch (offline) {
    const cached = await cache.match(request, { ignoreSearch: true });
    if (cached) return cached;
    throw offline;
  }
  if (response.ok && !request.headers.has('range')) {
    const previous = await cache.match(request);
    await cache.put(request, response.clone());
    if (previous && isVersioned(request) && changed(previous, response)) await tellPages(clientId);
  }
  return response;
}

function isVersioned(request) {
  const name = new URL(request.url).pathname.split('/').pop();
  return VERSIONED.includes(name);
}

// Without hashes in the file names, the server's validators tell a new build apart.
function changed(before, after) {
  const key = (r) => ['etag', 'last-modified', 'content-length'].map((h) => r.headers.get(h) ?? '').join('|');
  return key(before) !== key(after);
}

// The page that asked for the new file first (it runs it), then every other open page.
async function tellPages(clientId) {
  const asking = clientId ? await self.clients.get(clientId) : undefined;
  const others = await self.clients.matchAll({ type: 'window' });
  for (const client of new Set([asking, ...others].filter(Boolean))) {
    client.postMessage({ kind: 'updated' });
  }
}
