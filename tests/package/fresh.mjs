// The packed package installed into a fresh folder, as a site would install it, with the bundler
// example beside it: shared by the type check (types.test.mjs) and the browser test of the
// package across three origins (tests/browser/package.test.mjs).

import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { PACKAGE_NAME } from '../../npm/dist.mjs';
import { REPO } from '../browser/server.mjs';

export { PACKAGE_NAME };

/** The tarball `./build.sh dist` packed for `version`. */
export function tarball(version) {
  const file = path.join(REPO, 'dist', `${PACKAGE_NAME}-${version}.tgz`);
  if (!existsSync(file)) throw new Error(`${file} is missing: run ./build.sh dist`);
  return file;
}

/**
 * A new temporary folder with the tarball installed (npm, offline: the package has no
 * dependencies) and the bundler example's files copied in; the bundler's one tool, esbuild, is
 * linked from the repository's node_modules (no registry in the tests). Returns { dir, packageDir }.
 */
export function installFresh(version) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'nucleus-fresh-'));
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', tarball(version)], { cwd: dir, stdio: 'inherit' });
  const example = path.join(REPO, 'examples/bundler');
  cpSync(example, dir, {
    recursive: true,
    filter: (source) => !/[/\\](node_modules|out|package\.json|sw\.js)$/.test(source),
  });
  for (const tool of ['esbuild', '@esbuild']) symlinkSync(path.join(REPO, 'node_modules', tool), path.join(dir, 'node_modules', tool));
  return { dir, packageDir: path.join(dir, 'node_modules', PACKAGE_NAME) };
}

/** `tsc --noEmit -p dir` with the repository's TypeScript: { ok, output }. */
export function typeCheck(dir) {
  try {
    const output = execFileSync(process.execPath, [path.join(REPO, 'node_modules/typescript/bin/tsc'), '--noEmit', '-p', dir], { encoding: 'utf8' });
    return { ok: true, output };
  } catch (error) {
    return { ok: false, output: `${error.stdout}${error.stderr}` };
  }
}
