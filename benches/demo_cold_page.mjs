// The web demo's first answer as a newcomer gets it: open the page that `scripts/demo.sh web` serves (URL), load the
// default model (its button Load), ask, and print the seconds since opening it when the model is ready and when the
// answer's first text shows. benches/demo_cold.sh web runs it; headless Chromium as in the browser tests.
// Usage: node benches/demo_cold_page.mjs URL
import { launchChromium } from '../tests/browser/chromium.mjs';

const url = process.argv[2];
const browser = await launchChromium();
try {
  const page = await browser.context.newPage();
  const start = performance.now();
  const seconds = () => ((performance.now() - start) / 1000).toFixed(1);
  const minutes = { timeout: 600_000 };
  await page.goto(url);
  await page.getByRole('button', { name: 'Load', exact: true }).click();
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, minutes);
  console.log(`page: the model is ready ${seconds()} s after opening the page (${await page.locator('#engine').textContent()})`);
  await page.getByLabel('Message', { exact: true }).fill('Why is the sky blue?');
  await page.getByLabel('Message', { exact: true }).press('Enter');
  const lastAnswer = () => [...document.querySelectorAll('article.msg.assistant .content')].at(-1)?.textContent.trim() ?? '';
  await page.waitForFunction(lastAnswer, null, minutes);
  console.log(`page: the first text of the answer ${seconds()} s after opening the page`);
  await page.waitForFunction(() => Number(document.body.dataset.replies ?? 0) > 0, null, minutes);
  console.log(`page: the answer is whole ${seconds()} s after opening the page (${await page.locator('#speed').textContent()})`);
} finally {
  await browser.close();
}
