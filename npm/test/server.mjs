// A small static HTTP server for the tests (Node suites and the headless-Chromium page).
import { createReadStream, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, normalize } from 'node:path';

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json', '.css': 'text/css' };

/**
 * Serve `root` (static files) and `files` (URL path -> file path). `/too-large.gguf` claims 5 GiB and
 * sends 64 bytes; requests are counted per path in `server.hits`, and the body bytes sent per path in `server.sent`;
 * `server.requests` lists each file request (`{ method, path, range, ifRange, status, sent }`, `sent` its body bytes).
 * `headers` go with every response (e.g. COOP/COEP, which make a page cross-origin isolated). Requests for which
 * `refuse(req)` is true get a 404.
 *
 * Files are served as a file server does: with a strong ETag (size and mtime) and Last-Modified unless `validators`
 * is false, `Accept-Ranges: bytes`, one range of `Range: bytes=N-` or `bytes=N-M` as a 206 (a 416 past the end),
 * unless an `If-Range` that is not the file's ETag or Last-Modified asks for the whole file (200), and HEAD. A body is
 * cut after `cut(req)` bytes when that is a number: the connection closes short of its Content-Length, as a network
 * failure would.
 */
export async function serve({ root, files = {}, headers = {}, refuse = () => false, validators = true, cut = () => undefined }) {
  const hits = new Map();
  const sent = new Map();
  const requests = [];
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
    let stat;
    try {
      stat = statSync(file);
      if (!stat.isFile()) throw new Error('not a file');
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    const size = stat.size;
    const etag = `"${size.toString(16)}-${Math.floor(stat.mtimeMs).toString(16)}"`;
    const lastModified = stat.mtime.toUTCString();
    const head = { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream', 'accept-ranges': 'bytes' };
    if (validators) Object.assign(head, { etag, 'last-modified': lastModified });
    let [start, end, status] = [0, size - 1, 200];
    const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
    const ifRange = req.headers['if-range'];
    if (range && (ifRange === undefined || (validators && (ifRange === etag || ifRange === lastModified)))) {
      start = Number(range[1]);
      end = range[2] === '' ? size - 1 : Math.min(Number(range[2]), size - 1);
      if (start >= size || start > end) {
        res.writeHead(416, { 'content-range': `bytes */${size}` }).end();
        return;
      }
      status = 206;
      head['content-range'] = `bytes ${start}-${end}/${size}`;
    }
    const request = { method: req.method, path, range: req.headers.range, ifRange, status, sent: 0 };
    requests.push(request);
    res.writeHead(status, { ...head, 'content-length': String(end - start + 1) });
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    const limit = cut(req);
    const last = limit === undefined ? end : Math.min(end, start + limit - 1);
    const stream = createReadStream(file, { start, end: last });
    stream.on('data', (chunk) => {
      sent.set(path, (sent.get(path) ?? 0) + chunk.length);
      request.sent += chunk.length;
    });
    if (last < end) {
      stream.on('data', (chunk) => res.write(chunk));
      // What was written goes out, then the connection closes. The pause lets the client take the bytes first: a
      // browser may drop bytes that arrive together with the connection's failure, and the tests count on a known cut.
      stream.on('end', () => setTimeout(() => res.socket?.end(), 300));
    } else {
      stream.pipe(res);
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${server.address().port}`;
  return {
    origin,
    hits,
    sent,
    requests,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(resolve);
    }),
  };
}
