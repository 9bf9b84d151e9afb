// Headless Chromium (Debian's, not a downloaded one) with WebGPU on SwiftShader, driven by
// playwright-core. The flags are the ones that give a WebGPU adapter on a machine without a GPU.
// And Firefox ESR (Debian's `firefox-esr`), driven by puppeteer-core over WebDriver BiDi: no
// WebGPU on Linux, so every page runs the CPU engine there.

import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

const BASE_FLAGS = [
  '--no-sandbox', '--disable-gpu-sandbox', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--disable-quic',
];

/** A browser context; `webgpu: false` leaves out --enable-unsafe-webgpu (no adapter then). */
export async function launch({ webgpu = true, viewport = { width: 1280, height: 900 } } = {}) {
  const userDataDir = await mkdtemp(path.join(os.tmpdir(), 'nucleus-chromium-'));
  const args = webgpu ? [...BASE_FLAGS, '--enable-unsafe-webgpu'] : BASE_FLAGS;
  return chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args, viewport });
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

export const FIREFOX = process.env.FIREFOX ?? '/usr/bin/firefox-esr';

/** Headless Firefox ESR in a fresh profile (puppeteer-core's browser: close it when done). */
export function launchFirefox() {
  return puppeteer.launch({ browser: 'firefox', executablePath: FIREFOX, headless: true, protocol: 'webDriverBiDi' });
}

/** `promise`, or an error naming `what` when it has not settled after `ms`. */
export function within(ms, what, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
