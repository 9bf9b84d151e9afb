// The bundle: src/main.ts and the package's API in one module, out/main.js. The worker and the
// wasm modules are not bundled: main.ts gives `assets`, the package's folder on a CDN. The service
// worker must be the site's own: the package's sw.js is copied beside the page.
import { copyFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import * as esbuild from 'esbuild';

await esbuild.build({
  entryPoints: ['src/main.ts'],
  bundle: true,
  format: 'esm',
  target: 'es2022',
  outdir: 'out',
  absWorkingDir: import.meta.dirname,
});
copyFileSync(createRequire(import.meta.url).resolve('nucleus-lm/sw.js'), new URL('sw.js', import.meta.url));
