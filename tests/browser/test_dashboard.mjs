// The dashboard (api/dashboard.html, served at /) in Debian's chromium driven by
// playwright-core, against real demo hosts; and the Prometheus/Grafana kit in
// examples/ checked against the /metrics those hosts export.
//   MEMTRIM_BUILD_DIR            where memtrim-demo is (default: build/)
//   MEMTRIM_UPDATE_SCREENSHOT=1  also copy the desktop screenshot to docs/dashboard.png
// Screenshots go to tests/artifacts/. Prints "N passed, N failed"; exits 1 on failure.
import { chromium } from 'playwright-core';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const buildDir = process.env.MEMTRIM_BUILD_DIR || path.join(root, 'build');
const demoBin = path.join(buildDir, 'memtrim-demo');
const artifacts = path.join(root, 'tests/artifacts');
const OVERALL_TIMEOUT_MS = 240e3;
const TOKEN = 's3cret-token';
const GiB = 1024 ** 3;
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

// Every check() this file makes: a run that makes fewer (a section that threw before its
// checks, or one left out) fails, whatever passed. Change it with the checks.
const EXPECTED_CHECKS = 26;
let passed = 0;
let failed = 0;
const demos = [];
let browser = null;

async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name} (${((Date.now() - t0) / 1e3).toFixed(1)} s)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.message ? e.message.split('\n')[0] : e}`);
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* ---------- demo hosts ---------- */
async function startDemo(name, config) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `memtrim-browser-${name}-`));
  const portFile = path.join(dir, 'port');
  const log = fs.openSync(path.join(dir, 'demo.log'), 'w');
  const cfg = { HttpPort: 0, Database: path.join(dir, 'm.sqlite'), SampleIntervalSeconds: 1, ...config };
  const proc = spawn(demoBin, ['--config', JSON.stringify(cfg), '--port-file', portFile,
    '--workers', '4', '--study-mb', '64', '--pause-ms', '500'], { stdio: ['ignore', log, log] });
  const demo = { name, dir, proc, exited: false, started: Date.now() };
  proc.on('exit', () => { demo.exited = true; });
  demos.push(demo);
  for (let i = 0; i < 100; i++) {
    const port = fs.existsSync(portFile) ? fs.readFileSync(portFile, 'utf8').trim() : '';
    if (port) {
      demo.base = `http://127.0.0.1:${port}/`;
      return demo;
    }
    if (demo.exited) break;
    await sleep(100);
  }
  throw new Error(`demo host ${name} did not start: ${fs.readFileSync(path.join(dir, 'demo.log'), 'utf8')}`);
}
async function stopDemo(demo, signal = 'SIGTERM') {
  if (demo.exited) return;
  demo.proc.kill(signal);
  for (let i = 0; i < 50 && !demo.exited; i++) await sleep(100);
  if (!demo.exited) demo.proc.kill('SIGKILL');
}
async function getJson(demo, p) {
  const r = await fetch(demo.base + p, { cache: 'no-store' });
  return r.json();
}

/* ---------- the page ---------- */
// Console errors of a page; `allowStatus` lists HTTP statuses the test provokes on purpose.
function watchConsole(page, allowStatus = []) {
  const errors = [];
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const text = msg.text();
    const m = /status of (\d+)/.exec(text);
    if (m && allowStatus.includes(Number(m[1]))) return;
    errors.push(text);
  });
  page.on('pageerror', (e) => errors.push('uncaught: ' + e.message));
  return errors;
}
// The /memory/stats bodies the page itself received, in order. RSS is read at each request
// (a90eb2d): two requests of one cached snapshot (the same timestamp_ms) may differ in
// rss_bytes and in what follows from it (fragmentation_ratio, the counterfactual, saved), so
// the page is compared with the body it rendered, never with a fetch of the test's own.
const statsSeen = new WeakMap();
function statsBodies(page) {
  if (!statsSeen.has(page)) {
    const bodies = [];
    statsSeen.set(page, bodies);
    page.on('response', (r) => {
      if (new URL(r.url()).pathname.endsWith('/memory/stats') && r.status() === 200)
        bodies.push(r.json().catch(() => null));
    });
  }
  return statsSeen.get(page);
}
// Run fn(stats) on `want` snapshots the page showed, stats being the body it rendered (its
// timestamps and RSS), at most 20 tries; returns how many it compared.
async function onSameSnapshot(page, demo, want, fn) {
  let compared = 0;
  const seen = statsBodies(page);
  const shownNow = () => page.$eval('#cards', (e) => ({
    ts: e.dataset.timestamp, hts: e.dataset.heapTimestamp,
    rss: e.querySelector('.card[data-metric="rss_bytes"] .value').dataset.value }));
  for (let attempt = 0; attempt < 20 && compared < want; attempt++) {
    const before = await page.$eval('#cards', (e) => e.dataset.timestamp);
    await page.waitForFunction((b) => document.querySelector('#cards').dataset.timestamp !== b,
      before, { timeout: 6e3, polling: 20 });
    const shown = await shownNow();
    const bodies = (await Promise.all(seen)).filter((b) => b && String(b.timestamp_ms) === shown.ts &&
      String(b.heap_timestamp_ms ?? '') === shown.hts && String(b.rss_bytes) === shown.rss);
    const s = bodies[bodies.length - 1];
    if (!s) continue; // its response was not seen (a listener added after it): the next one
    // fn reads the page in several steps: a refresh in between (a poll every 2 s, later on a
    // loaded machine) would mix two snapshots. A comparison counts, or fails, only when the
    // page still shows the same snapshot after it.
    const failure = await fn(s).then(() => null, (e) => e);
    const after = await shownNow();
    if (after.ts !== shown.ts || after.hts !== shown.hts || after.rss !== shown.rss) continue;
    if (failure) throw failure;
    compared++;
  }
  return compared;
}
const cardValue = (page, metric) =>
  page.$eval(`.card[data-metric="${metric}"] .value`, (e) => e.dataset.value);

async function checkDesktop(demo, ctx) {
  const page = await ctx.newPage();
  const errors = watchConsole(page);
  await page.goto(demo.base, { waitUntil: 'load' });

  await check('page loads and shows the stats', async () => {
    await page.waitForSelector('#cards[data-timestamp]', { timeout: 10e3 });
    assert(await page.title() === 'memtrim', 'title is ' + await page.title());
    assert(await page.$eval('body', (b) => b.dataset.api) === 'ok', 'body[data-api] is not ok');
  });

  await check('numbers equal /memory/stats of the same snapshot', async () => {
    // The page shows exactly the /memory/stats body it received (onSameSnapshot).
    const fields = ['rss_bytes', 'heap_in_use_bytes', 'heap_free_bytes', 'heap_mmapped_bytes',
      'fragmentation_ratio', 'memory_limit_bytes', 'cgroup_usage_bytes'];
    const compared = await onSameSnapshot(page, demo, 2, async (s) => {
      for (const f of fields) {
        const v = await cardValue(page, f);
        assert(v === String(s[f] ?? ''), `${f}: page shows ${v}, /memory/stats says ${s[f]}`);
      }
    });
    assert(compared >= 2, `the page and /memory/stats never showed the same snapshot (${compared} matches)`);
    // Formatted text agrees with the exact value (MiB/GiB, 3 significant digits).
    const rss = await page.$eval('.card[data-metric="rss_bytes"] .value',
      (e) => ({ v: Number(e.dataset.value), text: e.textContent, title: e.title }));
    const m = /^([\d.]+) (KiB|MiB|GiB)$/.exec(rss.text);
    assert(m, 'RSS is shown as ' + rss.text);
    const scale = { KiB: 1024, MiB: 1024 ** 2, GiB: GiB }[m[2]];
    assert(Math.abs(Number(m[1]) * scale - rss.v) / rss.v < 0.01, `RSS text ${rss.text} vs ${rss.v}`);
    assert(rss.title.replace(/,/g, '').startsWith(String(rss.v)), 'RSS title is ' + rss.title);
    assert(!(await page.$eval('.card[data-metric="memory_limit_bytes"]', (e) => e.hidden)),
      'the memory-limit card is hidden although a limit is configured');
    // What the kernel charges the cgroup, beside RSS: its anon and page-cache split.
    const st = await getJson(demo, 'memory/stats');
    const cg = await page.$eval('.card[data-metric="cgroup_usage_bytes"]',
      (e) => ({ hidden: e.hidden, sub: e.querySelector('#cgroup-sub').textContent }));
    assert(cg.hidden === (st.cgroup_usage_bytes == null), 'cgroup card hidden: ' + cg.hidden);
    if (st.cgroup_anon_bytes != null)
      assert(/^anon .+, page cache .+/.test(cg.sub), 'the cgroup card says ' + cg.sub);
  });

  await check('the chart draws RSS and heap series with points', async () => {
    await page.waitForFunction(() => Number(document.querySelector('#chart').dataset.points) >= 12,
      null, { timeout: 20e3 });
    const paths = await page.$$eval('#chart path.ln', (ps) => ps.map((p) => ({
      metric: p.dataset.metric, segments: (p.getAttribute('d').match(/[ML]/g) || []).length })));
    for (const metric of ['rss_bytes', 'heap_in_use_bytes', 'heap_free_bytes']) {
      const p = paths.find((x) => x.metric === metric);
      assert(p && p.segments >= 3, `${metric} line has ${p ? p.segments : 0} points`);
    }
    assert(await page.$$eval('#chart .axis text', (t) => t.length) >= 4, 'no axis labels');
  });

  await check('the window selector reloads the chart', async () => {
    await page.click('#windows button[data-window="1h"]');
    assert(await page.$eval('#windows button[data-window="1h"]', (b) => b.getAttribute('aria-pressed')) === 'true',
      '1 h is not selected');
    await page.waitForFunction(() => Number(document.querySelector('#chart').dataset.points) >= 3,
      null, { timeout: 10e3 });
    await page.click('#windows button[data-window="15m"]');
    await page.waitForFunction(() => Number(document.querySelector('#chart').dataset.points) >= 12,
      null, { timeout: 10e3 });
  });

  await check('"Trim now" shows the result and adds a row to the trims table', async () => {
    await page.waitForSelector('#trims tbody', { state: 'attached' });
    const before = await page.$$eval('#trims tbody tr', (rows) => rows.map((r) => r.dataset.id));
    // Click when there is something to release (burst trims run at most every TrimMinGapSeconds).
    for (let i = 0; i < 60; i++) {
      if ((await getJson(demo, 'memory/stats')).releasable_estimate_bytes > 64 * 1024 ** 2) break;
      await sleep(250);
    }
    await page.click('#trim-btn');
    await page.waitForSelector('#trimbox[data-state="ok"]', { timeout: 10e3 });
    const text = await page.textContent('#trim-result');
    assert(/^Released .* in .*RSS/.test(text), 'trim result reads: ' + text);
    // A trim already running (a burst) is shared: then its row is the one to expect.
    const result = await page.$eval('#trim-result', (e) => ({ ...e.dataset }));
    const row = await page.waitForFunction((id) => {
      const tr = document.querySelector(`#trims tbody tr[data-id="${id}"]`);
      return tr ? { trigger: tr.dataset.trigger, released: tr.children[3].dataset.value } : null;
    }, result.id, { timeout: 15e3 }).catch(() => null);
    assert(row, `no row for trim ${result.id} (coalesced: ${result.coalesced}) in 15 s`);
    const got = await row.jsonValue();
    assert(!before.includes(result.id), `trim ${result.id} was already in the table`);
    const api = await getJson(demo, 'memory/trims?limit=50');
    const rec = api.trims.find((x) => String(x.id) === result.id);
    // Our own trim is a manual one; a shared one is whatever trim ran (the API's record says which).
    const want = result.coalesced === 'true' ? rec && rec.trigger : 'manual';
    assert(want && got.trigger === want, `the new row is ${got.trigger}, the API says ${rec && rec.trigger}` +
      ` (coalesced: ${result.coalesced})`);
    assert(rec && rec.released_bytes === Number(result.released) && Number(got.released) === rec.released_bytes,
      `released: result ${result.released}, row ${got.released}, API ${rec && rec.released_bytes}`);
    // Each row's reason for releasing under a page is the API's (none where it released).
    const whys = await page.$$eval('#trims tbody tr', (rows) =>
      rows.map((r) => [r.dataset.id, r.children[3].dataset.why || null]));
    let compared = 0;
    for (const [id, why] of whys) {
      const x = api.trims.find((t) => String(t.id) === id);
      if (!x) continue;
      compared++;
      assert(why === x.released_nothing_reason, `trim ${id}: the row says ${why}, the API ${x.released_nothing_reason}`);
    }
    assert(compared >= 1, 'no trims row to compare with the API');
    await page.waitForFunction(() => Number(document.querySelector('#chart').dataset.trims) >= 1,
      null, { timeout: 15e3 });
  });

  await check('the saved card and the "without memtrim" line agree with /memory/stats; trims draw RSS before and after', async () => {
    // saved = the counterfactual less RSS, in the page as in the API, of one snapshot.
    const compared = await onSameSnapshot(page, demo, 1, async (s) => {
      const shown = await page.$eval('#saved', (e) => ({
        saved: e.querySelector('.value').dataset.value, without: e.dataset.rssWithout, rss: e.dataset.rss,
        atPeak: e.dataset.savedAtPeak, sub: e.querySelector('#saved-sub').textContent }));
      assert(shown.saved === String(s.saved_bytes), `saved: page ${shown.saved}, API ${s.saved_bytes}`);
      assert(shown.without === String(s.rss_without_memtrim_bytes),
        `without memtrim: page ${shown.without}, API ${s.rss_without_memtrim_bytes}`);
      assert(Number(shown.saved) === Number(shown.without) - Number(shown.rss),
        `saved ${shown.saved} is not ${shown.without} - ${shown.rss}`);
      assert(s.saved_bytes === s.rss_without_memtrim_bytes - s.rss_bytes, 'the API: saved is not without - RSS');
      assert(Number(shown.atPeak) === Math.max(0, s.rss_without_memtrim_peak_bytes - s.rss_peak_bytes),
        `saved at peak: page ${shown.atPeak}`);
      assert(/^without memtrim .+ · at peak .+ · total .+ GB-h$/.test(shown.sub), 'the saved card says ' + shown.sub);
    });
    assert(compared === 1, 'the page and /memory/stats never showed the same snapshot');
    // The demo's studies are freed and trimmed: something was saved, and the card's cost line is there.
    assert(/^for .+ of memtrim CPU · .+ trimming · .+ in /.test(await page.textContent('#saved-cost')),
      'the cost line says ' + await page.textContent('#saved-cost'));
    // The host stall line names the trigger of the longest wait; /metrics, read after, has
    // that trigger's trims measured (counters only grow).
    await page.waitForFunction(() => document.querySelector('#saved').dataset.stallTrigger, null, { timeout: 15e3 });
    const stall = await page.textContent('#saved-stall');
    const st = /^host stall: max .+ \((manual|periodic|burst|pressure)\)$/.exec(stall);
    assert(st, 'the host stall line says ' + stall);
    const metricsText = await (await fetch(demo.base + 'metrics', { cache: 'no-store' })).text();
    const measured = new RegExp('^memtrim_trim_host_stall_measured_total\\{trigger="' + st[1] + '"\\} (\\d+)$', 'm').exec(metricsText);
    assert(measured && Number(measured[1]) > 0, `the line names ${st[1]}, /metrics: ${measured && measured[0]}`);
    await page.waitForFunction(() => {
      const p = document.querySelector('#chart path.ln[data-metric="rss_without_memtrim_bytes"]');
      return p && (p.getAttribute('d').match(/[ML]/g) || []).length >= 3;
    }, null, { timeout: 20e3 });
    // Each trim's RSS before and after, from its record, drawn at the trim (before above after).
    await page.waitForFunction(() => Number(document.querySelector('#chart').dataset.drops) >= 1,
      null, { timeout: 15e3 });
    const drops = await page.$$eval('#chart .trim-drop', (ds) => ds.map((d) => ({ id: d.dataset.id,
      before: d.dataset.before, after: d.dataset.after, y1: Number(d.querySelector('line').getAttribute('y1')),
      y2: Number(d.querySelector('line').getAttribute('y2')) })));
    const trims = (await getJson(demo, 'memory/trims?limit=1000')).trims;
    let checked = 0;
    for (const d of drops) {
      const t = trims.find((x) => String(x.id) === d.id);
      if (!t) continue;
      assert(d.before === String(t.rss_before_bytes) && d.after === String(t.rss_after_bytes),
        `trim ${d.id}: drawn ${d.before} -> ${d.after}, recorded ${t.rss_before_bytes} -> ${t.rss_after_bytes}`);
      if (t.released_bytes > 0) assert(d.y1 < d.y2, `trim ${d.id} released ${t.released_bytes} but is drawn upwards`);
      checked++;
    }
    assert(checked >= 1, `no drawn trim is in /memory/trims (${drops.length} drawn)`);
  });

  await check('the probe cost is shown from /memory/stats and /metrics', async () => {
    await page.waitForFunction(() => document.querySelector('#probe dd[data-key="heap_probes_total"]').dataset.value,
      null, { timeout: 15e3 });
    const calls = Number(await page.$eval('#probe dd[data-key="heap_probes_total"]', (e) => e.dataset.value));
    assert(calls > 0, 'mallinfo2 calls: ' + calls);
    const last = await page.$eval('#probe dd[data-key="heap_probe_duration_seconds"]', (e) => e.textContent);
    assert(/(µs|ms)$/.test(last), 'last mallinfo2 call shows ' + last);
  });

  await check('the allocator card names the allocator of /memory/stats', async () => {
    await page.waitForFunction(() => document.querySelector('#allocator').dataset.allocator, null, { timeout: 10e3 });
    const a = (await getJson(demo, 'memory/stats')).allocator;
    const shown = await page.$eval('#allocator', (e) => ({ name: e.dataset.allocator,
      text: e.querySelector('#allocator-name').textContent, sub: e.querySelector('#allocator-sub').textContent }));
    assert(shown.name === a.name && shown.text.startsWith(a.name), `card shows ${shown.text}, API says ${a.name}`);
    assert(shown.sub.includes(a.release), `card says ${shown.sub}, API release ${a.release}`);
    const label = await page.$eval('#probe .stats-call', (e) => e.textContent);
    assert(label === a.stats_call, 'the stats call is named ' + label + ', API says ' + a.stats_call);
  });

  await check('the doctor panel shows the findings and the arena panel one bar per arena', async () => {
    await page.waitForFunction(() => document.querySelector('#findings .finding, #findings [data-findings]'),
      null, { timeout: 20e3 });
    const ids = ['pressure_repeats', 'many_arenas', 'arena_max_auto', 'released_memory_returns', 'trims_release_little',
      'probe_budget_limited', 'no_memory_limit', 'heap_never_frees', 'pinned_arena'];
    const shown = await page.$$eval('#findings .finding', (es) => es.map((e) =>
      ({ id: e.dataset.id, title: e.querySelector('b').textContent, rec: e.querySelector('.rec').textContent })));
    for (const f of shown) assert(ids.includes(f.id) && f.title && f.rec, 'finding ' + JSON.stringify(f));
    const doc = await getJson(demo, 'memory/doctor');
    if (doc.findings.length > 0 && shown.length === 0) /* the page asked before there were any */
      await page.waitForFunction(() => document.querySelector('#findings .finding'), null, { timeout: 20e3 });
    await page.waitForFunction(() => document.querySelectorAll('#arenas .arena').length > 0, null, { timeout: 20e3 });
    const bars = await page.$$eval('#arenas .arena .n', (es) => es.map((e) => e.textContent));
    assert(bars[0] === 'main', 'the first bar is ' + bars[0]);
    // each bar carries what of its free memory no trim can give back (/memory/arenas' pinned_bytes)
    const pinned = await page.$$eval('#arenas .arena', (es) => es.map((e) => e.dataset.pinned));
    assert(pinned.every((p) => /^\d+$/.test(p)), 'pinned per arena: ' + JSON.stringify(pinned));
    const summary = await page.$eval('#arenas-summary', (e) => e.textContent);
    assert(summary.startsWith(bars.length + ' arena'), 'summary ' + summary + ' for ' + bars.length + ' bars');
  });

  await check('polling pauses while the tab is hidden and resumes when it is shown', async () => {
    const setHidden = (hidden) => page.evaluate((h) => {
      Object.defineProperty(document, 'hidden', { configurable: true, get: () => h });
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => (h ? 'hidden' : 'visible') });
      document.dispatchEvent(new Event('visibilitychange'));
    }, hidden);
    // The network, not the page's own counter: every request the page sends (playwright's
    // request events) from before it is hidden.
    const seen = [];
    const onRequest = (r) => seen.push(r.url());
    page.on('request', onRequest);
    try {
      await setHidden(true);
      // Requests already on the way are answered (no poller has a request or a timer)...
      await page.waitForFunction(() => document.body.dataset.polling === '0', null, { timeout: 20e3 });
      if (process.env.MEMTRIM_CONTROL === 'suite-dashboard-polls-hidden') // the control: a poller left running
        await page.evaluate(() => setInterval(() => fetch('memory/stats'), 2000));
      // ...then none is sent while it stays hidden: 4.5 s, over two periods of /memory/stats
      // (2 s) and one of /healthz and /memory/trims (5 s), the pollers of a page that kept
      // polling would send 4 or more. A count that must be 0: no load can make it pass wrongly.
      const before = seen.length;
      await sleep(4500);
      const hidden = seen.slice(before);
      assert(hidden.length === 0, `${hidden.length} requests while hidden: ${hidden.join(' ')}`);
      await setHidden(false);
      // Shown again: every poller asks at once (8 of them), then keeps its timer.
      await page.waitForFunction(() => Number(document.body.dataset.polling) > 0, null, { timeout: 20e3 });
      for (const t0 = Date.now(); seen.length < before + 3 && Date.now() - t0 < 20e3;) await sleep(20);
      assert(seen.length >= before + 3, `only ${seen.length - before} requests after being shown: ${seen.slice(before).join(' ')}`);
    } finally {
      page.off('request', onRequest);
    }
  });

  // Let the host run a while so that the screenshot shows a few sawtooth cycles.
  const wait = 50e3 - (Date.now() - demo.started);
  if (wait > 0) await sleep(wait);
  await check('the 15-minute window charts the samples of the last minute', async () => {
    await page.click('#windows button[data-window="15m"]');
    await page.waitForFunction(() => Number(document.querySelector('#chart').dataset.points) >= 30,
      null, { timeout: 20e3 });
  });
  await page.mouse.move(0, 0);
  const shot = path.join(artifacts, 'dashboard-1280.png');
  await page.screenshot({ path: shot, fullPage: true });
  if (process.env.MEMTRIM_UPDATE_SCREENSHOT === '1') fs.copyFileSync(shot, path.join(root, 'docs/dashboard.png'));

  await check('no console errors while the API answers', async () => {
    assert(errors.length === 0, errors.join(' | '));
  });
  return page;
}

async function checkPhone(demo) {
  const ctx = await browser.newContext({ viewport: { width: 375, height: 812 }, deviceScaleFactor: 2,
    isMobile: true, hasTouch: true });
  try {
    const page = await ctx.newPage();
    const errors = watchConsole(page);
    await page.goto(demo.base);
    await check('phone width (375 px): no horizontal overflow', async () => {
      await page.waitForSelector('#cards[data-timestamp]', { timeout: 10e3 });
      await page.waitForFunction(() => Number(document.querySelector('#chart').dataset.points) > 0,
        null, { timeout: 15e3 });
      await page.waitForSelector('#trims tbody tr', { timeout: 10e3 });
      const w = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: innerWidth }));
      assert(w.scroll <= w.inner, `scrollWidth ${w.scroll} > innerWidth ${w.inner}`);
      const overflowing = await page.evaluate(() => [...document.querySelectorAll('main *')]
        .filter((e) => e.getBoundingClientRect().right > innerWidth + 0.5 && e.closest('[hidden]') === null)
        .map((e) => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className).slice(0, 3));
      assert(overflowing.length === 0, 'elements past the right edge: ' + overflowing.join(', '));
      await page.screenshot({ path: path.join(artifacts, 'dashboard-375.png'), fullPage: true });
      assert(errors.length === 0, errors.join(' | '));
    });
  } finally {
    await ctx.close();
  }
}

// The Orthanc adapter serves the API and the page under /memtrim/: a small
// proxy does the same here, and the page is opened as /memtrim (no slash).
async function checkPrefix(demo) {
  const target = new URL(demo.base);
  const proxy = http.createServer((req, res) => {
    if (!/^\/memtrim(\/|\?|$)/.test(req.url)) {
      res.writeHead(404).end();
      return;
    }
    const up = http.request({ host: target.hostname, port: target.port, method: req.method,
      path: req.url.slice('/memtrim'.length).replace(/^(?!\/)/, '/'), headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.writeHead(502).end());
    req.pipe(up);
  });
  await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: 'dark' });
  try {
    const page = await ctx.newPage();
    const errors = watchConsole(page);
    await check('works under a prefix (/memtrim, as in Orthanc) with relative URLs', async () => {
      await page.goto(`http://127.0.0.1:${proxy.address().port}/memtrim`);
      await page.waitForSelector('#cards[data-timestamp]', { timeout: 10e3 });
      await page.waitForFunction(() => Number(document.querySelector('#chart').dataset.points) > 0,
        null, { timeout: 15e3 });
      const where = await page.evaluate(() => location.pathname);
      assert(where === '/memtrim/', 'the page is at ' + where);
      await page.screenshot({ path: path.join(artifacts, 'dashboard-dark.png') });
      assert(errors.length === 0, errors.join(' | '));
    });
  } finally {
    await ctx.close();
    proxy.close();
  }
}

// A host with a token, a store that cannot open (degraded) and a long manual-trim interval.
async function checkAuthAndDegraded() {
  const demo = await startDemo('auth', { AuthToken: TOKEN, ManualTrimMinIntervalMs: 60000,
    Database: '/nonexistent-memtrim-dir/m.sqlite' });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  try {
    const page = await ctx.newPage();
    const errors = watchConsole(page, [401, 429, 503]);
    await page.goto(demo.base);
    await check('degraded /healthz shows a banner with the reason', async () => {
      await page.waitForSelector('#banner-degraded:not([hidden])', { timeout: 10e3 });
      const text = await page.textContent('#banner-degraded');
      assert(/degraded/.test(text) && /database cannot be opened/.test(text), 'banner: ' + text);
      assert(await page.$eval('#status', (e) => e.textContent) === 'degraded', 'status pill is not degraded');
    });
    await check('"Trim now" asks for the token on 401, retries with it and keeps it', async () => {
      await page.click('#trim-btn');
      await page.waitForSelector('#token-form:not([hidden])', { timeout: 10e3 });
      await page.fill('#token-input', TOKEN);
      await page.click('#token-form button[type="submit"]');
      await page.waitForSelector('#trimbox[data-state="ok"]', { timeout: 10e3 });
      assert(/^Released /.test(await page.textContent('#trim-result')), 'no trim result');
      assert(await page.evaluate(() => sessionStorage.getItem('memtrim.token')) === TOKEN, 'token not kept');
    });
    await check('a second trim within ManualTrimMinIntervalMs says "try again in N s"', async () => {
      await page.waitForFunction(() => !document.querySelector('#trim-btn').disabled);
      await page.click('#trim-btn');
      await page.waitForSelector('#trimbox[data-state="warn"]', { timeout: 10e3 });
      const text = await page.textContent('#trim-result');
      const m = /try again in (\d+) s/.exec(text);
      assert(m && Number(m[1]) > 50 && Number(m[1]) <= 60, 'result reads: ' + text);
      assert(await page.$eval('#trim-btn', (b) => b.disabled), 'button not disabled while waiting');
      assert(errors.length === 0, errors.join(' | '));
    });
  } finally {
    await ctx.close();
    await stopDemo(demo);
  }
}

// A host near its limit (MemoryLimitBytes 200 MB, 64 MB studies): pressure trims
// show in the trims table with their reaction time, the same as /memory/trims.
async function checkPressure() {
  const demo = await startDemo('pressure', { MemoryLimitBytes: 200 * 1024 ** 2 });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  try {
    const page = await ctx.newPage();
    const errors = watchConsole(page);
    await page.goto(demo.base);
    await check('a pressure trim shows its reaction time in the trims table', async () => {
      const row = await page.waitForFunction(() => {
        const tr = document.querySelector('#trims tbody tr[data-trigger="pressure"]');
        const cell = tr && tr.querySelector('td.reaction');
        return cell && cell.dataset.value !== '' ? { id: tr.dataset.id, value: cell.dataset.value,
          text: cell.textContent } : null;
      }, null, { timeout: 30e3 }).catch(() => null);
      assert(row, 'no pressure trim with a reaction time in the table in 30 s');
      const got = await row.jsonValue();
      const api = await getJson(demo, 'memory/trims?trigger=pressure&limit=100');
      const rec = api.trims.find((x) => String(x.id) === got.id);
      assert(rec && rec.reaction_seconds === Number(got.value),
        `row ${got.id}: ${got.value}, API: ${rec && rec.reaction_seconds}`);
      assert(/(µs|ms| s)$/.test(got.text), 'reaction cell reads ' + got.text);
      const manual = await page.$$eval('#trims tbody tr:not([data-trigger="pressure"]) td.reaction',
        (cells) => cells.map((c) => c.textContent));
      assert(manual.every((t) => t === '–'), 'other triggers show a reaction: ' + manual.join(', '));
      const stats = await getJson(demo, 'memory/stats');
      assert(['poll', 'cgroup-v1-threshold', 'psi', 'memory-events'].includes(stats.pressure_source),
        'pressure_source ' + stats.pressure_source);
      assert(errors.length === 0, errors.join(' | '));
    });
    await check('the pressure trims\' cost shows beside their yield', async () => {
      const got = await page.waitForFunction(() => {
        const dd = document.querySelector('#probe dd[data-key="pressure_trims"]');
        return dd && Number(dd.dataset.value) > 0 ? { n: Number(dd.dataset.value), text: dd.textContent } : null;
      }, null, { timeout: 30e3 }).then((h) => h.jsonValue()).catch(() => null);
      assert(got, 'no pressure trims on the cost panel in 30 s');
      const r = await fetch(demo.base + 'metrics');
      const m = /^memtrim_trims_total\{trigger="pressure"\} (\S+)$/m.exec(await r.text());
      assert(m && Number(m[1]) >= got.n, `panel ${got.n}, /metrics ${m && m[1]}`);
      assert(/^[\d,]+ in .+(µs|ms| s)released .+B/.test(got.text), 'pressure trims read ' + got.text);
    });
  } finally {
    await ctx.close();
    await stopDemo(demo);
  }
}

// A host whose reads need the token too: the page asks for it before it can show anything.
async function checkReadAuth() {
  const demo = await startDemo('readauth', { AuthToken: TOKEN, ReadRequiresAuth: true });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  try {
    const page = await ctx.newPage();
    const errors = watchConsole(page, [401]);
    await page.goto(demo.base);
    await check('with ReadRequiresAuth the page asks for the token, then shows the stats', async () => {
      await page.waitForSelector('#token-form:not([hidden])', { timeout: 10e3 });
      assert(await page.$eval('#cards', (e) => !e.dataset.timestamp), 'stats shown without a token');
      await page.fill('#token-input', TOKEN);
      await page.press('#token-input', 'Enter');
      await page.waitForSelector('#cards[data-timestamp]', { timeout: 10e3 });
      assert(Number(await cardValue(page, 'rss_bytes')) > 0, 'no RSS after the token');
      assert(errors.length === 0, errors.join(' | '));
    });
  } finally {
    await ctx.close();
    await stopDemo(demo);
  }
}

/* ---------- HTTPS ---------- */
// A self-signed certificate for localhost (openssl), and the base64 SHA-256 of its public key:
// chromium trusts exactly that key (--ignore-certificate-errors-spki-list) and nothing else,
// with the context's ignoreHTTPSErrors off.
function makeCert(dir, name) {
  const key = path.join(dir, `${name}.key`);
  const crt = path.join(dir, `${name}.pem`);
  const r = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256',
    '-nodes', '-keyout', key, '-out', crt, '-days', '2', '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { encoding: 'utf8' });
  assert(r.status === 0, 'openssl req: ' + r.stderr);
  fs.chmodSync(key, 0o600);
  const spki = spawnSync('sh', ['-c', 'openssl x509 -in "$1" -pubkey -noout | openssl pkey -pubin ' +
    '-outform der | openssl dgst -sha256 -binary | base64', 'sh', crt], { encoding: 'utf8' });
  assert(spki.status === 0 && spki.stdout.trim(), 'spki: ' + spki.stderr);
  return { key, crt, spki: spki.stdout.trim() };
}

async function checkHttps() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'memtrim-browser-pki-'));
  const good = makeCert(dir, 'trusted');
  const other = makeCert(dir, 'unknown');
  const READ = 'read-only-' + TOKEN;
  const demo = await startDemo('https', { HttpsCertificate: good.crt, HttpsPrivateKey: good.key,
    AuthToken: TOKEN, ReadToken: READ });
  const stranger = await startDemo('https-unknown', { HttpsCertificate: other.crt, HttpsPrivateKey: other.key });
  const httpsBase = (d) => d.base.replace('http://127.0.0.1', 'https://localhost');
  const b = await chromium.launch({
    executablePath: process.env.MEMTRIM_CHROMIUM || '/usr/bin/chromium',
    args: [...CHROMIUM_ARGS, `--ignore-certificate-errors-spki-list=${good.spki}`],
    timeout: 30e3,
  });
  try {
    const ctx = await b.newContext({ viewport: { width: 1280, height: 900 }, ignoreHTTPSErrors: false });
    const page = await ctx.newPage();
    const errors = watchConsole(page, [401]);
    await check('over HTTPS the page loads, asks for a token, and shows the stats with the read token', async () => {
      const resp = await page.goto(httpsBase(demo));
      assert(resp && resp.ok() && resp.url().startsWith('https://localhost:'), 'page: ' + (resp && resp.url()));
      await page.waitForSelector('#token-form:not([hidden])', { timeout: 10e3 });
      await page.fill('#token-input', READ);
      await page.press('#token-input', 'Enter');
      await page.waitForSelector('#cards[data-timestamp]', { timeout: 10e3 });
      assert(Number(await cardValue(page, 'rss_bytes')) > 0, 'no RSS over HTTPS');
      assert(errors.length === 0, errors.join(' | '));
    });
    await check('a certificate chromium was not told to trust is refused (ignoreHTTPSErrors off)', async () => {
      const p2 = await ctx.newPage();
      let refused = '';
      try {
        await p2.goto(httpsBase(stranger), { timeout: 10e3 });
      } catch (e) {
        refused = String(e.message);
      }
      assert(/ERR_CERT/.test(refused), 'the unknown certificate was accepted: ' + refused.split('\n')[0]);
      await p2.close();
    });
    await ctx.close();
  } finally {
    await b.close().catch(() => {});
    await stopDemo(demo);
    await stopDemo(stranger);
  }
}

async function checkUnreachable(demo, page) {
  await check('stopping the host shows the "unreachable" banner', async () => {
    await stopDemo(demo);
    assert(demo.exited, 'the demo host did not stop');
    await page.waitForSelector('#banner-unreachable:not([hidden])', { timeout: 10e3 });
    const text = await page.textContent('#banner-unreachable');
    assert(/unreachable/.test(text), 'banner: ' + text);
    assert(await page.$eval('body', (b) => b.dataset.api) === 'unreachable', 'body[data-api] is not unreachable');
    await page.screenshot({ path: path.join(artifacts, 'dashboard-unreachable.png') });
  });
}

/* ---------- the Prometheus/Grafana kit ---------- */
function exprsOf(node, out = []) {
  if (Array.isArray(node)) node.forEach((n) => exprsOf(n, out));
  else if (node && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if ((k === 'expr' || k === 'query' || k === 'definition') && typeof v === 'string') out.push(v);
      else exprsOf(v, out);
    }
  }
  return out;
}
async function checkGrafana(demo) {
  const exported = new Set();
  const text = await (await fetch(demo.base + 'metrics')).text();
  for (const line of text.split('\n')) {
    const m = /^# TYPE (\S+) (\S+)/.exec(line) || /^([a-zA-Z_:][\w:]*)/.exec(line);
    if (!m || line.startsWith('# HELP')) continue;
    exported.add(m[1]);
    if (m[2] === 'histogram') ['_bucket', '_sum', '_count'].forEach((s) => exported.add(m[1] + s));
  }
  const file = path.join(root, 'examples/grafana-dashboard.json');
  let dash = null;
  await check('examples/grafana-dashboard.json is valid JSON with panels', async () => {
    dash = JSON.parse(fs.readFileSync(file, 'utf8'));
    assert(Array.isArray(dash.panels) && dash.panels.length >= 5, 'fewer than 5 panels');
    for (const p of dash.panels.filter((x) => x.type !== 'row'))
      assert(p.targets && p.targets.length && p.targets.every((t) => t.expr), `panel "${p.title}" has no query`);
  });
  await check('every memtrim_* metric the Grafana dashboard queries is exported by /metrics', async () => {
    assert(dash, 'no dashboard');
    const exprs = exprsOf(dash);
    const used = new Set(exprs.flatMap((e) => e.match(/\bmemtrim_\w+/g) || []));
    assert(used.size >= 8, `only ${used.size} metrics used`);
    const missing = [...used].filter((n) => !exported.has(n));
    assert(missing.length === 0, 'not exported: ' + missing.join(', '));
    const text = exprs.join('\n');
    for (const need of ['histogram_quantile', 'memtrim_trim_duration_seconds_bucket', 'memtrim_trim_skips_total',
      'memtrim_released_bytes_total', 'memtrim_heap_in_use_bytes', 'memtrim_rss_bytes'])
      assert(text.includes(need), 'the dashboard does not use ' + need);
  });
  // --syntax-only: the CA and token files it names are the operator's (tests/e2e/test_fleet.py
  // checks it whole with files of its own).
  await check('promtool check config --syntax-only examples/prometheus.yml', async () => {
    const r = spawnSync('promtool', ['check', 'config', '--syntax-only',
      path.join(root, 'examples/prometheus.yml')],
      { encoding: 'utf8', timeout: 30e3 });
    // A skipped check is not a pass: promtool comes with Debian's prometheus (tests/install-deps.sh).
    assert(!(r.error && r.error.code === 'ENOENT'), 'promtool is not installed (tests/install-deps.sh all installs prometheus)');
    assert(r.status === 0, (r.stdout + r.stderr).trim());
  });
}

/* ---------- main ---------- */
async function main() {
  fs.mkdirSync(artifacts, { recursive: true });
  assert(fs.existsSync(demoBin), `${demoBin} is missing: build memtrim first`);
  const demo = await startDemo('main', { MemoryLimitBytes: 2 * GiB, TrimMinGapSeconds: 10 });
  browser = await chromium.launch({
    executablePath: process.env.MEMTRIM_CHROMIUM || '/usr/bin/chromium',
    args: CHROMIUM_ARGS,
    timeout: 30e3,
  });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await checkDesktop(demo, ctx);
  await checkPhone(demo);
  await checkPrefix(demo);
  await checkGrafana(demo);
  await checkAuthAndDegraded();
  await checkReadAuth();
  await checkPressure();
  await checkHttps();
  await checkUnreachable(demo, page);
}

const overall = setTimeout(() => {
  console.log(`FAIL overall timeout of ${OVERALL_TIMEOUT_MS / 1e3} s`);
  failed++;
  cleanup().finally(() => finish());
}, OVERALL_TIMEOUT_MS);

async function cleanup() {
  for (const d of demos) if (!d.exited) d.proc.kill('SIGKILL');
  if (browser) await browser.close().catch(() => {});
  browser = null;
}
function finish() {
  clearTimeout(overall);
  console.log(`${passed} passed, ${failed} failed (${EXPECTED_CHECKS} expected)`);
  if (passed + failed !== EXPECTED_CHECKS)
    console.log(`FAIL ${passed + failed} checks ran, ${EXPECTED_CHECKS} expected`);
  process.exit(failed === 0 && passed === EXPECTED_CHECKS ? 0 : 1);
}

try {
  await main();
} catch (e) {
  failed++;
  console.log('FAIL ' + (e && e.stack ? e.stack : e));
} finally {
  for (const d of demos) await stopDemo(d);
  await cleanup();
  finish();
}
