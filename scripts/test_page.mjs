#!/usr/bin/env node
// Browser test of the page `roformer serve` serves at GET / (crates/roformer-serve/src/page/index.html),
// in Debian's Chromium driven by playwright-core (scripts/page-test/, installed by
// scripts/install_browser_test_deps.sh).
//
//   node scripts/test_page.mjs --mock --screenshot page.png
//       unit test of the page: a stub server in this process serves the page file and mocks
//       GET /info, POST /fill-mask and POST /embed by the HTTP contract (it needs the bearer key
//       "mock-key", so the 401 error display is tested too);
//   node scripts/test_page.mjs --url http://127.0.0.1:PORT/ --screenshot page.png [--api-key KEY]
//       end-to-end test against a running `roformer serve` (KEY: the --api-key it was started with).
//
// The test types a line, masks a character with the keyboard and another with the mouse, reads the
// candidates (bars whose widths follow the percentages shown, percentages summing to at most 100 %,
// within the rounding of the one decimal shown), compares two lines (a cosine in [-1, 1]), checks the
// error display, checks that the page does not scroll sideways at 360 px, and saves a screenshot.
// It prints one line per check and exits 1 at the first failed one.

import { createRequire } from "node:module";
import { parseArgs } from "node:util";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";

const here = path.dirname(new URL(import.meta.url).pathname);
const PAGE_FILE = path.join(here, "..", "crates", "roformer-serve", "src", "page", "index.html");
const MOCK_KEY = "mock-key";
const LINE = "床前明月光，疑是地上霜。";
const HOSTILE = '<img src=x onerror="window.__injected=1">';
const FLAGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

const { values: opt } = parseArgs({
  options: {
    url: { type: "string" },
    mock: { type: "boolean", default: false },
    screenshot: { type: "string" },
    "api-key": { type: "string" },
    chromium: { type: "string", default: "/usr/bin/chromium" },
    "timeout-ms": { type: "string", default: "60000" },
  },
});
if (opt.mock === Boolean(opt.url) || !opt.screenshot) {
  console.error("usage: test_page.mjs (--mock | --url URL [--api-key KEY]) --screenshot FILE.png");
  process.exit(2);
}
const TIMEOUT = Number(opt["timeout-ms"]);
if (!(TIMEOUT > 0)) {
  console.error(`--timeout-ms ${opt["timeout-ms"]}: expected a positive number of milliseconds`);
  process.exit(2);
}

const require = createRequire(path.join(here, "page-test", "package.json"));
const { chromium } = require("playwright-core");

let checks = 0;
function check(ok, what, detail = "") {
  if (!ok) throw new Error(`FAILED: ${what}${detail ? ` (${detail})` : ""}`);
  checks += 1;
  console.log(`ok ${checks} - ${what}`);
}

// ---- The stub server (mock mode) -------------------------------------------------------

/** A deterministic unit vector per text, so the expected cosine can be computed here. */
function mockVector(text, normalize) {
  const v = new Array(16).fill(0);
  Array.from(text).forEach((ch, i) => {
    const c = ch.codePointAt(0);
    for (let j = 0; j < v.length; j++) v[j] += Math.sin(c * (j + 1) + i);
  });
  const n = Math.hypot(...v) || 1;
  return normalize === false ? v : v.map((x) => x / n);
}

function mockCandidates(text, topK) {
  const tokens = ["月", "光", "霜", HOSTILE, "山", "水", "风", "花", "雪", "云"];
  const scores = [0.41, 0.22, 0.1, 0.07, 0.05, 0.04, 0.03, 0.02, 0.01, 0.005];
  return tokens.slice(0, topK).map((t, i) => ({
    score: scores[i], token: 100 + i, token_str: t, sequence: text.replace("[MASK]", t),
  }));
}

function mockFillMask(body) {
  const inputs = body.inputs;
  const topK = body.parameters?.top_k ?? 5;
  if (typeof inputs !== "string") return [400, { error: "inputs: expected a string", error_type: "Validation" }];
  if (!Number.isInteger(topK) || topK < 1 || topK > 100) {
    return [422, { error: `top_k ${topK}: expected 1..=100`, error_type: "Validation" }];
  }
  const masks = inputs.split("[MASK]").length - 1;
  if (masks === 0) return [422, { error: "the text has no [MASK]", error_type: "Validation" }];
  const one = mockCandidates(inputs, topK);
  return [200, masks === 1 ? one : Array.from({ length: masks }, () => one)];
}

function mockEmbed(body) {
  const inputs = typeof body.inputs === "string" ? [body.inputs] : body.inputs;
  if (!Array.isArray(inputs) || inputs.some((t) => typeof t !== "string")) {
    return [400, { error: "inputs: expected a string or a list of strings", error_type: "Validation" }];
  }
  if (inputs.some((t) => t.length === 0)) return [422, { error: "an input is empty", error_type: "Empty" }];
  return [200, inputs.map((t) => mockVector(t, body.normalize))];
}

function startMock(requests) {
  const html = fs.readFileSync(PAGE_FILE);
  const server = http.createServer((req, res) => {
    const send = (status, value) => {
      res.writeHead(status, { "Content-Type": "application/json" });
      res.end(JSON.stringify(value));
    };
    if (req.method === "GET" && req.url === "/") {
      res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
      return res.end(html);
    }
    if (req.headers.authorization !== `Bearer ${MOCK_KEY}`) {
      return send(401, { error: "missing or wrong bearer key", error_type: "Unauthorized" });
    }
    if (req.method === "GET" && req.url === "/info") {
      return send(200, { model_id: "mock-model", model_sha: null, model_dtype: "float32",
        model_type: { embedding: { pooling: "mean" } }, fill_mask: true, version: "mock" });
    }
    const route = { "/fill-mask": mockFillMask, "/embed": mockEmbed }[req.url];
    if (req.method !== "POST" || !route) return send(404, { error: `no route ${req.url}`, error_type: "NotFound" });
    let raw = "";
    req.on("data", (chunk) => { raw += chunk; });
    req.on("end", () => {
      let body;
      try { body = JSON.parse(raw); } catch (e) {
        return send(400, { error: `malformed JSON: ${e.message}`, error_type: "Validation" });
      }
      requests.push({ route: req.url, body });
      return send(...route(body));
    });
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

// ---- The checks -------------------------------------------------------------------------

async function candidates(page) {
  await page.locator("#fm-results li.candidate").first().waitFor({ timeout: TIMEOUT });
  return page.$$eval("#fm-results li.candidate", (rows) => rows.map((li) => ({
    token: li.querySelector(".token").textContent,
    pct: li.querySelector(".pct").textContent,
    bar: li.querySelector(".bar").getBoundingClientRect().width,
    track: li.querySelector(".track").getBoundingClientRect().width,
  })));
}

function checkCandidates(rows, label) {
  check(rows.length >= 1 && rows.length <= 8, `${label}: 1 to 8 candidates`, `got ${rows.length}`);
  const pcts = rows.map((r) => {
    const m = /^(\d{1,3}\.\d)%$/.exec(r.pct);
    check(m !== null, `${label}: "${r.pct}" is a percentage with one decimal`);
    return Number(m[1]);
  });
  const sum = pcts.reduce((a, b) => a + b, 0);
  // Each shown figure is rounded to 0.1, so the sum may exceed the true one by 0.05 per row.
  check(sum <= 100 + 0.05 * pcts.length, `${label}: percentages sum to at most 100`, `sum ${sum.toFixed(1)}`);
  check(pcts.every((p, i) => i === 0 || p <= pcts[i - 1]), `${label}: sorted by score`, pcts.join(","));
  rows.forEach((r, i) => {
    // The bar's width is the score's share of the track, to a pixel.
    const expected = (r.track * pcts[i]) / 100;
    check(r.track > 0 && Math.abs(r.bar - expected) <= 1.5,
      `${label}: bar ${i + 1} is ${pcts[i]}% of its track`, `${r.bar.toFixed(1)} of ${r.track.toFixed(1)} px`);
  });
}

async function fillMaskFlow(page, key, requests) {
  const text = page.locator("#fm-text");
  await text.fill("");
  await text.pressSequentially(LINE);
  const cells = page.locator("#fm-cells .cell");
  check((await cells.count()) === Array.from(LINE).length, "one cell per character typed");
  if (key) {
    await cells.nth(3).click();
    const err = page.locator("#fm-error");
    await err.filter({ hasText: "401" }).waitFor({ timeout: TIMEOUT });
    const shown = await err.textContent();
    check(shown.includes("Unauthorized") && shown.includes("API key"), "a 401 shows its JSON error and a hint", shown);
    await page.locator("#api-key").fill(key);
  }
  // Keyboard: focus the fifth character and press Enter.
  await cells.nth(4).focus();
  await page.keyboard.press("Enter");
  checkCandidates(await candidates(page), "Enter on 光");
  check((await cells.nth(4).getAttribute("aria-pressed")) === "true", "the masked cell is marked pressed");
  // Mouse: click the fourth character.
  await page.locator("#fm-results").evaluate((el) => el.replaceChildren());
  await cells.nth(3).click();
  const rows = await candidates(page);
  checkCandidates(rows, "click on 月");
  check((await page.locator("#fm-error").textContent()) === "", "no error shown after a success");
  if (requests) {
    const last = requests.filter((r) => r.route === "/fill-mask").at(-1);
    check(last.body.inputs === "床前明[MASK]光，疑是地上霜。" && last.body.parameters.top_k === 8,
      "the request masks exactly the clicked character, top_k 8", JSON.stringify(last.body));
    const hostile = rows.find((r) => r.token === HOSTILE);
    check(hostile !== undefined, "model text is shown literally");
    check((await page.locator("#fm-results img").count()) === 0
      && (await page.evaluate(() => window.__injected)) === undefined, "model text is never parsed as HTML");
  }
}

async function similarityFlow(page, requests) {
  await page.locator("#sim-b").fill("");
  await page.locator("#sim-run").click();
  check((await page.locator("#sim-error").textContent()).includes("two lines"), "an empty line is refused on the page");
  const a = "床前明月光";
  const b = "举头望明月";
  await page.locator("#sim-a").fill(a);
  await page.locator("#sim-b").fill(b);
  await page.locator("#sim-b").press("Enter");
  const value = page.locator("#sim-value");
  await value.filter({ hasText: "cosine" }).waitFor({ timeout: TIMEOUT });
  const shown = await value.textContent();
  const m = /^cosine (-?\d\.\d{4})$/.exec(shown);
  check(m !== null, "the cosine is shown with four decimals", shown);
  const cos = Number(m[1]);
  check(cos >= -1 && cos <= 1, "the cosine is in [-1, 1]", String(cos));
  if (requests) {
    const [u, v] = [mockVector(a), mockVector(b)];
    const expected = u.reduce((s, x, i) => s + x * v[i], 0);
    check(Math.abs(cos - expected) <= 5e-5, "the cosine is that of the two vectors (to 5e-5)", `${cos} vs ${expected}`);
    const last = requests.filter((r) => r.route === "/embed").at(-1);
    check(JSON.stringify(last.body) === JSON.stringify({ inputs: [a, b], normalize: true }), "the /embed request body");
  }
}

/** Waits until GET /health answers 200 (the model is loaded), up to the timeout. */
async function waitHealthy(url) {
  const deadline = Date.now() + TIMEOUT;
  let last = "no answer";
  while (Date.now() < deadline) {
    try {
      const res = await fetch(new URL("/health", url));
      if (res.ok) return;
      last = `HTTP ${res.status}`;
    } catch (e) {
      last = String(e.cause?.code ?? e.message);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url}: /health did not answer 200 within ${TIMEOUT} ms (last: ${last})`);
}

/** Opens the page as a browser does: a navigation sends no Authorization header, so the page
 * itself must load without the key even on a server started with --api-key (only the calls it
 * makes carry the key). */
async function openPage(page, url) {
  const res = await page.goto(url, { timeout: TIMEOUT });
  if (res.status() !== 200) {
    throw new Error(`GET ${url} answered ${res.status()}: the page must load without a key`);
  }
}

async function main() {
  const requests = opt.mock ? [] : null;
  const server = opt.mock ? await startMock(requests) : null;
  const url = server ? `http://127.0.0.1:${server.address().port}/` : opt.url;
  const key = opt.mock ? MOCK_KEY : opt["api-key"];
  if (!opt.mock) await waitHealthy(url);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "roformer-page-test-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: opt.chromium, headless: true, args: FLAGS, viewport: { width: 900, height: 1000 },
  });
  const pageErrors = [];
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    await openPage(page, url);
    check((await page.title()) === "RoFormer", `the page loads from ${url}`);
    check((await page.locator("#fm-text").inputValue()) === LINE, "the default line is the poem's first line");
    await fillMaskFlow(page, key, requests);
    await similarityFlow(page, requests);
    await page.screenshot({ path: opt.screenshot, fullPage: true });
    check(fs.statSync(opt.screenshot).size > 0, `screenshot saved to ${opt.screenshot}`);
    await page.setViewportSize({ width: 360, height: 800 });
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    check(width <= 360, "no sideways scrolling at 360 px", `scrollWidth ${width}`);
    check(pageErrors.length === 0, "no uncaught script errors", pageErrors.join("; "));
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
    if (server) server.close();
  }
  console.log(`page test passed (${opt.mock ? "mock server" : url}): ${checks} checks`);
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
