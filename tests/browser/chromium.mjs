// Debian's headless Chromium for the browser tests, driven by playwright-core (a dev dependency of npm/):
// it cannot download a browser of its own here.
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { PACKAGE_DIR } from '../../npm/test/helpers.mjs';
import { serve } from '../../npm/test/server.mjs';

const { chromium } = createRequire(join(PACKAGE_DIR, 'package.json'))('playwright-core');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
// As root in a container, without the sandbox; no background traffic to Google on a closed network.
const ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** Response headers that make a page cross-origin isolated (SharedArrayBuffer, so the threaded build). */
export const ISOLATED = { 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' };

/** A browser with a fresh profile (its own IndexedDB and caches; `profile`, its directory); `close()` also deletes it. */
export async function launchChromium() {
  const profile = mkdtempSync(join(tmpdir(), 'ruvllm-chromium-'));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
  return {
    context,
    profile,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** A fresh browser whose page at `origin`'s example page has a storage quota of `bytes`; `close()` ends it. Chromium
 * applies a quota override only to an origin whose storage it has not opened yet (so a fresh profile), and only
 * spelled with its trailing slash, as its storage keys are. It enforces the override on writes, but
 * `navigator.storage.estimate()` still reports the profile's quota. */
export async function quotaPage(origin, bytes) {
  const browser = await launchChromium();
  try {
    const page = browser.context.pages()[0] ?? (await browser.context.newPage());
    const cdp = await browser.context.newCDPSession(page);
    await cdp.send('Storage.overrideQuotaForOrigin', { origin: `${origin}/`, quotaSize: bytes });
    await page.goto(`${origin}/examples/browser/index.html`);
    return { page, close: browser.close };
  } catch (e) {
    await browser.close();
    throw e;
  }
}

/** The package's example page (npm/examples/browser/index.html) with `files` served beside it (and `serveOptions`, see
 * npm/test/server.mjs), in a Chromium of its own, for the tests of one file: opened before them, closed after them.
 * Its `page`, `server` and `browser` are there once the tests run. */
export function examplePage(files, serveOptions = {}) {
  const example = {};
  before(async () => {
    example.server = await serve({ ...serveOptions, root: PACKAGE_DIR, files });
    example.browser = await launchChromium();
    example.page = example.browser.context.pages()[0] ?? (await example.browser.context.newPage());
    await example.page.goto(`${example.server.origin}/examples/browser/index.html`);
  });
  after(async () => {
    await example.browser?.close();
    await example.server?.close();
  });
  return example;
}
