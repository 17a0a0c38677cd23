// Debian's headless Chromium for the browser tests, driven by playwright-core (a dev dependency of npm/):
// it cannot download a browser of its own here.
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PACKAGE_DIR } from '../../npm/test/helpers.mjs';

const { chromium } = createRequire(join(PACKAGE_DIR, 'package.json'))('playwright-core');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
// As root in a container, without the sandbox; no background traffic to Google on a closed network.
const ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** Response headers that make a page cross-origin isolated (SharedArrayBuffer, so the threaded build). */
export const ISOLATED = { 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' };

/** A browser with a fresh profile (its own IndexedDB and caches); `close()` also deletes the profile. */
export async function launchChromium() {
  const profile = mkdtempSync(join(tmpdir(), 'ruvllm-chromium-'));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
