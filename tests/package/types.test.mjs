// The npm package without a browser: `./build.sh dist` packed it; installed into a fresh folder it
// holds the runtime files, the declarations and a manifest at the one version; `tsc --noEmit`
// accepts the typed example (examples/bundler/src/main.ts, every option of the API) against the
// installed declarations, and refuses a wrong option, a wrong attribute and a wrong value (the
// test of the test).

import test from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { packageFiles, readmeSection } from '../../npm/dist.mjs';
import { VERSION } from '../browser/server.mjs';
import { PACKAGE_NAME, installFresh, typeCheck } from './fresh.mjs';

const { dir, packageDir } = installFresh(VERSION);
test.after(() => rmSync(dir, { recursive: true, force: true }));

test('the installed package is the runtime files, the declarations and a manifest at the one version', () => {
  const manifest = JSON.parse(readFileSync(path.join(packageDir, 'package.json'), 'utf8'));
  assert.equal(manifest.name, PACKAGE_NAME);
  assert.equal(manifest.version, VERSION, "Cargo.toml's workspace version");
  assert.equal(readFileSync(path.join(packageDir, 'pkg/version.js'), 'utf8').match(/VERSION = '([^']+)'/)[1], VERSION);
  for (const file of [...packageFiles(), 'sw.js', 'nucleus.d.ts', 'nucleus-element.d.ts', 'trace.d.ts', 'LICENSE-MIT', 'LICENSE-APACHE']) {
    assert.ok(existsSync(path.join(packageDir, file)), file);
  }
  // Every export points at a file of the package.
  for (const [name, target] of Object.entries(manifest.exports)) {
    for (const file of typeof target === 'string' ? [target] : Object.values(target)) {
      if (!file.includes('*')) assert.ok(existsSync(path.join(packageDir, file)), `${name}: ${file}`);
    }
  }
  assert.ok(readFileSync(path.join(packageDir, 'README.md'), 'utf8').includes(readmeSection().split('\n').slice(2, 6).join('\n')),
    "the package's README is README.md's section for documentation authors");
});

test('tsc accepts the typed example, which uses every option, against the installed declarations', () => {
  const { ok, output } = typeCheck(dir);
  assert.ok(ok, output);
});

test('tsc refuses a wrong option, a wrong attribute and a wrong value (the test of the test)', () => {
  const wrong = path.join(dir, 'src/wrong.ts');
  writeFileSync(wrong, `import { Nucleus } from 'nucleus-lm';
import type { NucleusPlaygroundAttributes } from 'nucleus-lm/element';
const lm = await Nucleus.load({ backnd: 'cpu' });
lm.generate({ prompt: 'x', top_p: 0.9 });
const attributes: NucleusPlaygroundAttributes = { mode: 'inspect' };
export { attributes };
`);
  try {
    const { ok, output } = typeCheck(dir);
    assert.equal(ok, false);
    assert.match(output, /src\/wrong\.ts\(3,\d+\): error TS2561: .*'backnd' does not exist in type 'LoadOptions'. Did you mean to write 'backend'\?/);
    assert.match(output, /src\/wrong\.ts\(4,\d+\): error TS2561: .*'top_p' does not exist in type 'GenerateOptions'. Did you mean to write 'topP'\?/);
    assert.match(output, /src\/wrong\.ts\(5,\d+\): error TS2820: Type '"inspect"' is not assignable/);
    assert.equal(output.match(/error TS/g).length, 3, output);
  } finally {
    rmSync(wrong);
  }
});
