// A static file server on 127.0.0.1 for the browser benchmarks. It sends COOP/COEP, so pages are
// crossOriginIsolated (SharedArrayBuffer, hence wasm threads for wllama and, later, for ruvllm).
// `mounts` maps URL prefixes ("/web/") to folders; nothing outside them is served. Nothing is cached (`no-store`),
// unless `cache` is true: then files may be kept an hour, as a site would serve its assets (and Chromium keeps the
// compiled code of a cached .wasm, so that a reload does not start over from the baseline compiler).
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
};

export function startServer(mounts, { cache = false } = {}) {
  const server = http.createServer((req, res) => {
    const headers = {
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
      'Cross-Origin-Resource-Policy': 'same-origin',
      'Cache-Control': cache ? 'max-age=3600' : 'no-store',
    };
    const pathname = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const mount = Object.keys(mounts).find((prefix) => pathname.startsWith(prefix));
    const base = mount && path.resolve(mounts[mount]);
    const file = mount && path.resolve(base, pathname.slice(mount.length));
    if (!mount || !file.startsWith(base + path.sep)) return res.writeHead(404, headers).end('not found');
    fs.stat(file, (err, st) => {
      if (err || !st.isFile()) return res.writeHead(404, headers).end('not found');
      res.writeHead(200, { ...headers, 'Content-Type': MIME[path.extname(file)] ?? 'application/octet-stream', 'Content-Length': st.size });
      if (req.method === 'HEAD') return res.end();
      fs.createReadStream(file).pipe(res);
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({ server, origin: `http://127.0.0.1:${server.address().port}` }));
  });
}
