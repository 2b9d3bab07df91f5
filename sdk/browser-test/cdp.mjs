// Connects to a smolvm browser with playwright-core's connectOverCDP, opens
// a page, optionally sets a cookie and localStorage, optionally screenshots
// it, and prints what cookies and storage the page sees, as JSON.
// Usage: node cdp.mjs CDP_URL PAGE_URL set|read [SCREENSHOT.png]
import { chromium } from 'playwright-core';

const [cdp, url, mode, out] = process.argv.slice(2);
const browser = await chromium.connectOverCDP(cdp, { timeout: 90000 });
try {
  const ctx = browser.contexts()[0];
  const page = await ctx.newPage();
  await page.setViewportSize({ width: 800, height: 600 });
  await page.goto(url, { timeout: 60000 });
  if (mode === 'set') {
    await ctx.addCookies([{ name: 'run', value: 'first', url }]);
    await page.evaluate(() => localStorage.setItem('run', 'first'));
  }
  const cookies = (await ctx.cookies(url)).map((c) => `${c.name}=${c.value}`);
  const storage = await page.evaluate(() => localStorage.getItem('run'));
  if (out) await page.screenshot({ path: out });
  console.log(JSON.stringify({ cookies, storage, title: await page.title() }));
} finally {
  await browser.close();
}
