// Times one browser run per line of stdin ({"cdp": URL, "url": PAGE}) with
// playwright-core: connectOverCDP, then the first screenshot of PAGE in
// the page every smolvm browser starts with (about:blank, which
// connectOverCDP has already attached to): its navigation and the
// screenshot. Then, apart, the same page's second navigation (PAGE with
// its last number one more: same host) and screenshot (goto2,
// screenshot2), and a new page's creation (newPage), which a run that
// opens one more page pays. Prints one JSON line of milliseconds per
// run. Usage: node bench.mjs < runs.jsonl
import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';

const ms = (t) => Number(process.hrtime.bigint() - t) / 1e6;
for await (const line of createInterface({ input: process.stdin })) {
  const { cdp, url } = JSON.parse(line);
  const out = {};
  let t = process.hrtime.bigint();
  const browser = await chromium.connectOverCDP(cdp, { timeout: 90000 });
  out.connect = ms(t);
  try {
    const ctx = browser.contexts()[0];
    const [page] = ctx.pages();
    if (!page) throw new Error('the browser has no page');
    t = process.hrtime.bigint();
    await page.goto(url, { timeout: 60000 });
    out.goto = ms(t);
    t = process.hrtime.bigint();
    const png = await page.screenshot();
    out.screenshot = ms(t);
    out.bytes = png.length;
    // The same again in the same page, on another path of the same host:
    // what a navigation and a screenshot cost once the browser has done
    // each (what is left of the first ones is their first-time cost).
    t = process.hrtime.bigint();
    await page.goto(url.replace(/\d+$/, (n) => String(Number(n) + 1)), { timeout: 60000 });
    out.goto2 = ms(t);
    t = process.hrtime.bigint();
    await page.screenshot();
    out.screenshot2 = ms(t);
    t = process.hrtime.bigint();
    await ctx.newPage();
    out.newPage = ms(t);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
}
