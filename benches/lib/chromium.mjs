// Headless Debian Chromium for the benches that drive the npm package in a page (prefix_cache.mjs,
// long_conversation.mjs): playwright-core from npm/ (its dev dependency) or benches/ (benches/setup.sh), a fresh
// profile under target/ (its own IndexedDB), and the page server: benches/web, benches/lib, the npm package and the
// model's folder, from 127.0.0.1.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { BENCHES, ROOT, log, procMemMb } from './common.mjs';
import { startServer } from './serve.mjs';

function playwright() {
  for (const dir of [path.join(ROOT, 'npm'), BENCHES]) {
    try {
      return createRequire(path.join(dir, 'package.json'))('playwright-core');
    } catch {
      // not installed there
    }
  }
  throw new Error('playwright-core is missing: run `npm ci` in npm/ (or benches/setup.sh)');
}

/** A page of benches/web/`name` in a fresh headless Chromium, the model served as /model/<file name>; `cache`: let
 * Chromium cache what it fetches (lib/serve.mjs); `ready`: the global the page sets once its module has run;
 * `args`: more Chromium flags. */
export async function openPage(name, model, { executablePath = '/usr/bin/chromium', cache = false, ready = 'prefixBench', args = [] } = {}) {
  const mounts = {
    '/web/': path.join(BENCHES, 'web'),
    '/lib/': path.join(BENCHES, 'lib'),
    '/npm/': path.join(ROOT, 'npm'),
    '/model/': path.dirname(path.resolve(model)),
  };
  const { server, origin } = await startServer(mounts, { cache });
  fs.mkdirSync(path.join(ROOT, 'target'), { recursive: true });
  const profile = fs.mkdtempSync(path.join(ROOT, 'target', 'chromium-profile-'));
  // launch() refuses --user-data-dir; a persistent context on a fresh folder is the same thing.
  const context = await playwright().chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', ...args],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') log(`[page ${m.type()}]`, m.text());
  });
  page.on('pageerror', (e) => log('[page error]', e.message));
  const url = `${origin}/web/${name}`;
  /** Navigate (first time) or reload (a real reload: the page, its wasm instance and its memory start over). */
  const open = async (reload) => {
    if (reload) await page.reload();
    else await page.goto(url);
    await page.waitForFunction((global) => window[global] !== undefined, ready, { timeout: 60000 });
  };
  await open(false);
  const version = await page.evaluate(() => navigator.userAgent.match(/Chrome\/(\S+)/)?.[1]);
  return {
    page,
    version,
    modelUrl: `/model/${path.basename(model)}`,
    reload: () => open(true),
    close: async () => {
      await context.close();
      server.close();
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** All processes below `root` (Chromium forks its renderers through a zygote, so walk the parent links). */
function descendants(root) {
  const parent = new Map();
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      // The command name in field 2 may contain spaces; the parent pid is the 2nd field after its closing ')'.
      parent.set(Number(pid), Number(fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')[1]));
    } catch { /* the process has exited */ }
  }
  const below = new Set([root]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [pid, ppid] of parent) if (!below.has(pid) && below.has(ppid)) { below.add(pid); grew = true; }
  }
  below.delete(root);
  return [...below];
}

/** Peak and current RSS (MB) of each Chromium process below this one, by its --type (the browser process has none). */
export function chromiumPeaks() {
  const procs = [];
  for (const pid of descendants(process.pid)) {
    try {
      const type = (fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').match(/--type=([\w-]+)/) ?? [null, 'browser'])[1];
      procs.push({ pid, type, ...procMemMb(pid) });
    } catch { /* the process has exited */ }
  }
  return procs;
}
