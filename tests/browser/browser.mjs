// Headless Chromium (Debian's, not a downloaded one) with WebGPU on SwiftShader, driven by
// playwright-core. The flags are the ones that give a WebGPU adapter on a machine without a GPU.
// Firefox ESR (Debian's `firefox-esr`), driven by puppeteer-core over WebDriver BiDi, and WebKit
// (WebKitGTK's MiniBrowser under Xvfb, driven by npm selenium-webdriver through Debian's
// `WebKitWebDriver`): no WebGPU in either here, so every page runs the CPU engine there. Both sit
// behind one small page interface (`ENGINES`), with Chromium, so that one suite runs in all three.

import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';
import { Builder, By } from 'selenium-webdriver';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

const BASE_FLAGS = [
  '--no-sandbox', '--disable-gpu-sandbox', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--disable-quic',
];

/** Profiles not yet removed: a test that dies before closing its browser leaves none behind. */
const profiles = new Set();
/** Removes a profile; the browser may still be flushing it, so a few tries, and never a failure. */
const removeProfile = (dir) => {
  try {
    rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    profiles.delete(dir);
  } catch (error) {
    console.warn(`  [browser.mjs] could not remove the profile ${dir}: ${error.message}`);
  }
};
process.on('exit', () => profiles.forEach(removeProfile));

/**
 * A browser context in a fresh profile, removed once the context is closed (a profile holds the
 * models the page cached: half a gigabyte each); `webgpu: false` leaves out
 * --enable-unsafe-webgpu (no adapter then), `webAssembly: false` takes WebAssembly away from pages
 * and workers (V8 without its JIT, `--jitless`, has no WebAssembly); V8 has no switch for
 * `wasmSimd: false`.
 */
export async function launch({ webgpu = true, webAssembly = true, wasmSimd = true, viewport = { width: 1280, height: 900 } } = {}) {
  if (!wasmSimd) throw new Error('Chromium cannot be started without WebAssembly SIMD');
  const userDataDir = await mkdtemp(path.join(os.tmpdir(), 'nucleus-chromium-'));
  profiles.add(userDataDir);
  const args = [...BASE_FLAGS, ...(webgpu ? ['--enable-unsafe-webgpu'] : []), ...(webAssembly ? [] : ['--js-flags=--jitless'])];
  const context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args, viewport });
  // After close() has resolved the browser has exited and written its last file.
  const close = context.close.bind(context);
  context.close = async (...options) => {
    await close(...options);
    removeProfile(userDataDir);
  };
  return context;
}

/** Opens `url` and forwards the page's console errors to the test output. */
export async function open(context, url) {
  const page = await context.newPage();
  page.on('console', (message) => {
    if (message.type() === 'error' || process.env.NUCLEUS_BROWSER_LOG) console.log(`  [browser ${message.type()}] ${message.text()}`);
  });
  page.on('pageerror', (error) => console.log(`  [page error] ${error.message}`));
  await page.goto(url);
  return page;
}

const isEngineWorker = (worker) => /nucleus-(worker|thread)\.js/.test(worker.url());

/**
 * Watches the Nucleus workers (engine and helper threads) that `page` starts from now on, so a test
 * asks about its own workers and not about one an earlier test left ending. `started()` counts them;
 * `settled(what)` waits (10 s at most) until each has ended, `what` naming the moment in a failure.
 */
export function watchEngineWorkers(page) {
  const alive = new Set();
  let started = 0;
  const onWorker = (worker) => {
    if (!isEngineWorker(worker)) return;
    started += 1;
    alive.add(worker);
    worker.once('close', () => alive.delete(worker));
  };
  page.on('worker', onWorker);
  return {
    started: () => started,
    async settled(what) {
      for (let waited = 0; alive.size > 0; waited += 50) {
        if (waited >= 10_000) throw new Error(`${what}: ${alive.size} of the ${started} engine workers started are still running`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      page.off('worker', onWorker);
    },
  };
}

export const FIREFOX = process.env.FIREFOX ?? '/usr/bin/firefox-esr';
export const WEBKIT_DRIVER = process.env.WEBKIT_DRIVER ?? '/usr/bin/WebKitWebDriver';
export const MINIBROWSER = process.env.MINIBROWSER ?? '/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser';

/**
 * Headless Firefox ESR in a fresh profile (puppeteer-core's browser: close it when done);
 * `webAssembly: false` turns WebAssembly off (`javascript.options.wasm`); Firefox 153 has no
 * preference left for `wasmSimd: false`.
 */
export function launchFirefox({ webAssembly = true, wasmSimd = true } = {}) {
  if (!wasmSimd) throw new Error('Firefox cannot be started without WebAssembly SIMD');
  return puppeteer.launch({ browser: 'firefox', executablePath: FIREFOX, headless: true, protocol: 'webDriverBiDi',
    ...(webAssembly ? {} : { extraPrefsFirefox: { 'javascript.options.wasm': false } }) });
}

/**
 * A page of any engine, the few operations the cross-engine suite uses:
 * @typedef {object} EnginePage
 * @property {(fn: Function, arg?: unknown) => Promise<any>} run  `fn(arg)` in the page, awaited
 * @property {(fn: Function, ms: number, arg?: unknown) => Promise<void>} waitFor  until `fn(arg)` in the page is truthy
 * @property {(selector: string) => Promise<void>} click
 * @property {(selector: string, text: string) => Promise<void>} fill  replaces a field's text, typed
 * @property {(selector: string, value: string) => Promise<void>} select  picks a <select>'s option
 * @property {(selector: string, file: string) => Promise<void>} upload  gives a file input a file
 * @property {(selector: string) => Promise<string[]>} texts  the text of each match
 * @property {string[] | null} warnings  the console's warnings and errors (null: the engine's
 *   driver cannot read its console)
 * @property {() => Promise<void>} reload
 * @property {() => Promise<void>} close
 */

/** Chromium: one browser (a fresh profile) per `launch()`, a tab per page. */
const chromiumEngine = {
  name: 'Chromium',
  async launch(options) {
    const context = await launch(options);
    return {
      async open(url) {
        const page = await context.newPage();
        const warnings = [];
        page.on('console', (message) => {
          if (['warning', 'error'].includes(message.type())) warnings.push(message.text());
        });
        await page.goto(url);
        return {
          run: (fn, arg) => page.evaluate(fn, arg),
          waitFor: async (fn, ms, arg) => { await page.waitForFunction(fn, arg, { timeout: ms }); },
          click: (selector) => page.click(selector),
          fill: (selector, text) => page.fill(selector, text),
          select: async (selector, value) => { await page.selectOption(selector, value); },
          upload: (selector, file) => page.setInputFiles(selector, file),
          texts: (selector) => page.$$eval(selector, (nodes) => nodes.map((n) => n.textContent)),
          warnings,
          reload: async () => { await page.reload(); },
          close: () => page.close(),
        };
      },
      close: () => context.close(),
    };
  },
};

/** Firefox: one browser (a fresh profile) per `launch()`, a tab per page. */
const firefox = {
  name: 'Firefox',
  async launch(options) {
    const browser = await launchFirefox(options);
    return {
      async open(url) {
        const page = await browser.newPage();
        const warnings = [];
        page.on('console', (message) => {
          if (['warn', 'warning', 'error'].includes(message.type())) warnings.push(message.text());
        });
        await page.goto(url);
        return {
          run: (fn, arg) => page.evaluate(fn, arg),
          waitFor: async (fn, ms, arg) => { await page.waitForFunction(fn, { timeout: ms }, arg); },
          click: (selector) => page.click(selector),
          fill: (selector, text) => page.locator(selector).fill(text),
          select: async (selector, value) => { await page.select(selector, value); },
          upload: async (selector, file) => { await (await page.$(selector)).uploadFile(file); },
          texts: (selector) => page.$$eval(selector, (nodes) => nodes.map((n) => n.textContent)),
          warnings,
          reload: async () => { await page.reload(); },
          close: () => page.close(),
        };
      },
      close: () => browser.close(),
    };
  },
};

/** A TCP port nothing listens on now. */
async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The longest a WebDriver session may take to start, open its page or quit (each takes a second here). */
const SESSION_LIMIT_MS = 30_000;
/** Tries at starting a WebKit session, each on a new WebKitWebDriver after the first. */
const SESSION_START_TRIES = 2;

/**
 * WebKit: one WebKitWebDriver under its own Xvfb per `launch()`, a WebDriver session (a fresh
 * MiniBrowser process and profile) per page. Starting, opening and quitting a session are bounded:
 * a MiniBrowser that stops answering fails the test that used it, naming the step, instead of
 * holding the suite (a quit that does not answer ends the driver and its browsers; the next page
 * starts a new driver). A new session that WebKitWebDriver never answers (the MiniBrowser it
 * started never connected, before any page is open: once in a run of .ci/run here, never in nine
 * WebKit suite runs; the project's CI, unbounded then, held at the same place) ends that driver
 * and is tried once more on a new one, saying so: the browser's start, not what a test checks.
 * `webAssembly: false` turns JavaScriptCore's WebAssembly off (its `useWasm` option, which the
 * driver's MiniBrowser and web processes read from `JSC_useWasm`), `wasmSimd: false` its SIMD
 * (`useWasmSIMD`).
 */
const webkit = {
  name: 'WebKit',
  async launch({ webAssembly = true, wasmSimd = true } = {}) {
    let driver = null;
    const env = { ...process.env, ...(webAssembly ? {} : { JSC_useWasm: '0' }), ...(wasmSimd ? {} : { JSC_useWasmSIMD: '0' }) };
    const startDriver = async () => {
      const port = await freePort();
      const child = spawn('xvfb-run', ['-a', WEBKIT_DRIVER, `--port=${port}`], { stdio: 'ignore', detached: true, env });
      const server = `http://127.0.0.1:${port}`;
      for (let tries = 0; ; tries += 1) {
        const up = await fetch(`${server}/status`).then((r) => r.ok, () => false);
        if (up) break;
        if (tries === 100) throw new Error(`${WEBKIT_DRIVER} did not start on port ${port}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return { child, server };
    };
    const endDriver = () => {
      try {
        process.kill(-driver?.child.pid);
      } catch {
        // already gone
      }
      driver = null;
    };
    return {
      async open(url) {
        let session = null;
        for (let attempt = 1; !session; attempt += 1) {
          driver ??= await startDriver();
          const starting = new Builder().usingServer(driver.server)
            .withCapabilities({ browserName: 'MiniBrowser', 'webkitgtk:browserOptions': { binary: MINIBROWSER, args: ['--automation'] } })
            .build();
          try {
            session = await within(SESSION_LIMIT_MS, 'starting a WebKit session', starting);
          } catch (error) {
            starting.then((late) => late.quit(), () => {}).catch(() => {});
            endDriver();
            if (attempt === SESSION_START_TRIES) throw error;
            console.warn(`  [browser.mjs] ${error.message}: trying again on a new WebKitWebDriver`);
          }
        }
        await session.manage().setTimeouts({ script: 300_000, pageLoad: SESSION_LIMIT_MS });
        await session.get(url);
        const run = (fn, arg) => session.executeScript(`return (${fn})(arguments[0]);`, arg);
        return {
          run,
          waitFor: async (fn, ms, arg) => { await session.wait(() => run(fn, arg), ms); },
          click: (selector) => session.findElement(By.css(selector)).click(),
          async fill(selector, text) {
            const field = await session.findElement(By.css(selector));
            await field.clear();
            await field.sendKeys(text);
          },
          select: (selector, value) => session.findElement(By.css(`${selector} option[value="${value}"]`)).click(),
          upload: (selector, file) => session.findElement(By.css(selector)).sendKeys(file),
          texts: (selector) => run((s) => [...document.querySelectorAll(s)].map((n) => n.textContent), selector),
          warnings: null,
          reload: () => session.navigate().refresh(),
          async close() {
            try {
              await within(SESSION_LIMIT_MS, 'quitting a WebKit session', session.quit());
            } catch (error) {
              endDriver();
              throw error;
            }
          },
        };
      },
      async close() {
        endDriver();
      },
    };
  },
};

/** The engines the cross-engine suite runs in. */
export const ENGINES = { chromium: chromiumEngine, firefox, webkit };

/**
 * The thread count the threaded CPU engine should keep for its step timings (`info.backend.
 * threadTimings`, ms by count): the most within 2× the fastest (nucleus-worker.js's rule).
 */
export function keptThreads(timings) {
  const fastest = Math.min(...Object.values(timings));
  return Object.keys(timings).map(Number).sort((a, b) => a - b).findLast((n) => timings[n] <= fastest * 2);
}

/** `promise`, or an error naming `what` when it has not settled after `ms`. */
export function within(ms, what, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
