// The engine worker's script: the browser entry registers the platform (the wasm builds fetched beside their glue, as
// in a page), then the worker serves the page's calls (host.ts). Started by client.ts from its real URL (no `blob:`).
import '../browser.js';
import { serve } from './host.js';

serve(self as unknown as Parameters<typeof serve>[0]);
