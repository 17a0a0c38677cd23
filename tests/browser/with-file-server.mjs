// Run a command while serving test files over HTTP, for the Rust wasm32 test suites when they run in a
// headless browser (no file system there; tests/rust/support/mod.rs asks this server instead):
//   GET /file?path=<absolute path>  the file's bytes, for files below one of the served directories
//   GET /env                         this process's RUVLLM_* and HOME variables, as a JSON object
// The test page is served by wasm-bindgen-test-runner from another origin, with COEP: hence the CORS
// and CORP headers.
// Usage: node tests/browser/with-file-server.mjs PORT DIR... -- COMMAND ARGS...
// Exits with the command's status.
import { spawn } from 'node:child_process';
import { createReadStream, realpathSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { sep } from 'node:path';

const argv = process.argv.slice(2);
const dashes = argv.indexOf('--');
if (argv.length < 3 || dashes < 2 || dashes === argv.length - 1) {
  console.error('usage: node tests/browser/with-file-server.mjs PORT DIR... -- COMMAND ARGS...');
  process.exit(2);
}
const port = Number(argv[0]);
const roots = argv.slice(1, dashes).map((dir) => realpathSync(dir));
const [command, ...args] = argv.slice(dashes + 1);

const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => name.startsWith('RUVLLM_') || name === 'HOME'));

/** The real path of `path` if it is a file below a served directory, else undefined. */
function servedFile(path) {
  try {
    const real = realpathSync(path);
    return roots.some((root) => real.startsWith(root + sep)) && statSync(real).isFile() ? real : undefined;
  } catch {
    return undefined;
  }
}

const server = createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  const headers = { 'access-control-allow-origin': '*', 'cross-origin-resource-policy': 'cross-origin', 'cache-control': 'no-store' };
  if (url.pathname === '/env') {
    res.writeHead(200, { ...headers, 'content-type': 'application/json' }).end(JSON.stringify(env));
    return;
  }
  const file = url.pathname === '/file' ? servedFile(url.searchParams.get('path') ?? '') : undefined;
  if (!file) {
    res.writeHead(404, { ...headers, 'content-type': 'text/plain' }).end(`not served: ${url.pathname}${url.search}`);
    return;
  }
  res.writeHead(200, { ...headers, 'content-type': 'application/octet-stream', 'content-length': String(statSync(file).size) });
  createReadStream(file).pipe(res);
});

server.on('error', (e) => {
  console.error(`test file server: ${e.message}`);
  process.exit(1);
});
server.listen(port, '127.0.0.1', () => {
  console.error(`test file server on http://127.0.0.1:${port}/ serving ${roots.join(', ')}`);
  const child = spawn(command, args, { stdio: 'inherit' });
  child.on('error', (e) => {
    console.error(`${command}: ${e.message}`);
    process.exit(1);
  });
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
});
