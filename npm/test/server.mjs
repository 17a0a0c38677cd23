// A small static HTTP server for the tests (Node suites and the headless-Chromium page).
import { createReadStream, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, normalize } from 'node:path';

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json', '.css': 'text/css' };

/**
 * Serve `root` (static files) and `files` (URL path -> file path). `/too-large.gguf` claims 5 GiB and
 * sends 64 bytes; requests are counted per path in `server.hits`. `headers` go with every response
 * (e.g. COOP/COEP, which make a page cross-origin isolated). Requests for which `refuse(req)` is true get a 404.
 */
export async function serve({ root, files = {}, headers = {}, refuse = () => false }) {
  const hits = new Map();
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
    hits.set(path, (hits.get(path) ?? 0) + 1);
    if (refuse(req)) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('refused');
      return;
    }
    if (path === '/too-large.gguf') {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(5 * 1024 ** 3) });
      res.write(Buffer.alloc(64));
      return; // the client must give up on its own
    }
    const file = files[path] ?? (root && join(root, normalize(path).replace(/^(\.\.[/\\])+/, '')));
    let size;
    try {
      const s = statSync(file);
      if (!s.isFile()) throw new Error('not a file');
      size = s.size;
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream', 'content-length': String(size) });
    createReadStream(file).pipe(res);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${server.address().port}`;
  return {
    origin,
    hits,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(resolve);
    }),
  };
}
