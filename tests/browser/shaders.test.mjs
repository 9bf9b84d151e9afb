// The WGSL our kernels run compile under Chrome's own WGSL compiler (Tint), not only under naga
// (native wgpu): Tint is stricter, e.g. about constant expressions that are not finite. The files
// of shaders/ that are whole modules (the decode tail, linear.wgsl) are compiled as they are; the
// layer kernels are compiled as the shader builder assembles them, every variant (each weight
// format, both tunings, one-row and many-row), from the folder `SHADER_MODULES_DIR` that
// `cargo run --example shader_modules` writes (./build.sh test does).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { startServer, REPO, BLANK_PAGE } from './server.mjs';
import { launch, open } from './browser.mjs';

test('every shader module we run compiles without errors in Chromium', async () => {
  const wgslIn = (dir) => readdirSync(dir).filter((f) => f.endsWith('.wgsl'))
    .map((f) => [f, readFileSync(path.join(dir, f), 'utf8')]);
  const whole = wgslIn(path.join(REPO, 'shaders')).filter(([, code]) => code.includes('@group(0) @binding(0)'));
  const modulesDir = process.env.SHADER_MODULES_DIR;
  assert.ok(modulesDir, 'SHADER_MODULES_DIR: the folder shader_modules wrote (./build.sh test sets it)');
  const assembled = wgslIn(modulesDir);
  assert.ok(whole.length >= 4 && assembled.length > 100, `${whole.length} whole files, ${assembled.length} assembled modules`);
  const shaders = Object.fromEntries([...whole, ...assembled]);
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
