// The WGSL files in shaders/ compile under Chrome's own WGSL compiler (Tint), not only under
// naga (native wgpu): Tint is stricter, e.g. about constant expressions that are not finite.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { startServer, REPO, BLANK_PAGE } from './server.mjs';
import { launch, open } from './browser.mjs';

test('every shader in shaders/ compiles without errors in Chromium', async () => {
  const dir = path.join(REPO, 'shaders');
  const shaders = Object.fromEntries(readdirSync(dir).filter((f) => f.endsWith('.wgsl'))
    .map((f) => [f, readFileSync(path.join(dir, f), 'utf8')]));
  assert.ok(Object.keys(shaders).length >= 3);
  const server = await startServer({ extra: BLANK_PAGE });
  const context = await launch();
  try {
    const page = await open(context, `${server.url}blank.html`);
    const messages = await page.evaluate(async (sources) => {
      const adapter = await navigator.gpu.requestAdapter();
      const device = await adapter.requestDevice();
      const out = {};
      for (const [name, code] of Object.entries(sources)) {
        const module = device.createShaderModule({ code });
        const info = await module.getCompilationInfo();
        out[name] = info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
      }
      return out;
    }, shaders);
    for (const [name, errors] of Object.entries(messages)) assert.deepEqual(errors, [], name);
  } finally {
    await context.close();
    await server.close();
  }
});
