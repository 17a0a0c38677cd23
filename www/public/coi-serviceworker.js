/*
 * Cross-origin isolation for static hosts that cannot send headers (GitHub Pages and the like), in the manner of
 * coi-serviceworker (https://github.com/gzuidhof/coi-serviceworker). The page loads this file as a classic script;
 * when the page is not cross-origin isolated, it registers this same file as a service worker and reloads once.
 * The worker then adds `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`
 * to every response, so the page gets SharedArrayBuffer and the package its threaded build.
 * A host that sends the headers itself (the demo's dev and preview servers do) never registers it.
 * Files from other origins (a model on a CDN) must still come with CORS headers.
 */
if (typeof window === 'undefined') {
  self.addEventListener('install', () => self.skipWaiting());
  self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));
  self.addEventListener('fetch', (event) => {
    const request = event.request;
    if (request.cache === 'only-if-cached' && request.mode !== 'same-origin') return;
    event.respondWith(
      fetch(request).then((response) => {
        if (response.status === 0) return response; // opaque: cannot be changed
        const headers = new Headers(response.headers);
        headers.set('Cross-Origin-Embedder-Policy', 'require-corp');
        headers.set('Cross-Origin-Opener-Policy', 'same-origin');
        if (!headers.has('Cross-Origin-Resource-Policy')) headers.set('Cross-Origin-Resource-Policy', 'same-origin');
        return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
      }),
    );
  });
} else if (!window.crossOriginIsolated && window.isSecureContext && 'serviceWorker' in navigator) {
  const KEY = 'coi-serviceworker-reloaded';
  navigator.serviceWorker.register(document.currentScript.src).then(
    (registration) => {
      // Reload once when the worker controls no page yet; never loop if isolation still does not come.
      if (navigator.serviceWorker.controller || sessionStorage.getItem(KEY)) return;
      sessionStorage.setItem(KEY, '1');
      const reload = () => location.reload();
      if (registration.active) reload();
      else navigator.serviceWorker.addEventListener('controllerchange', reload, { once: true });
    },
    (e) => console.warn('coi-serviceworker: not registered:', e),
  );
}
