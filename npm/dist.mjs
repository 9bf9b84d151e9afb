// `./build.sh dist`: the npm package, `dist/nucleus-lm/`, from www/ and www/pkg/ (built first), then
// `npm pack` of it into dist/, printing what a site and its visitors download.
//
//   node npm/dist.mjs VERSION
//
// One owner for each part: the runtime files are the service worker's PACKAGE_FILES (www/sw.js:
// what it stores for offline use is what the package holds), the version is Cargo.toml's workspace
// version (build.sh passes it; www/pkg/version.js, written from it, must agree), and the package's
// README is README.md's section for documentation authors.

import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';
import { gzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const WWW = path.join(REPO, 'www');
const DIST = path.join(REPO, 'dist');

/** The package's name on npm (and in the examples' CDN URLs). */
export const PACKAGE_NAME = 'nucleus-lm';
/** The type declarations, beside their modules in www/. */
const DECLARATIONS = ['nucleus.d.ts', 'nucleus-element.d.ts', 'trace.d.ts'];
const LICENCES = ['LICENSE-MIT', 'LICENSE-APACHE'];
/** README.md's section that is the package's README. */
const README_SECTION = '## For documentation authors: the package';

/** The service worker's list of the package's runtime files. */
export function packageFiles() {
  const sandbox = { URL, self: { addEventListener() {}, location: { href: 'https://example.com/sw.js' } } };
  vm.runInNewContext(`${readFileSync(path.join(WWW, 'sw.js'), 'utf8')}; this.files = PACKAGE_FILES;`, sandbox);
  return [...sandbox.files];
}

/** README.md's section for documentation authors, to its next second-level heading. */
export function readmeSection() {
  const readme = readFileSync(path.join(REPO, 'README.md'), 'utf8');
  const start = readme.indexOf(`${README_SECTION}\n`);
  if (start < 0) throw new Error(`README.md has no "${README_SECTION}" section`);
  const end = readme.indexOf('\n## ', start + README_SECTION.length);
  return readme.slice(start, end < 0 ? undefined : end + 1);
}

function manifest(version, files) {
  const typed = (js, types) => ({ types: `./${types}`, default: `./${js}` });
  return {
    name: PACKAGE_NAME,
    version,
    description: 'A small language model in the browser (WebGPU, or the CPU in WebAssembly) that shows the next-token distribution and what each sampling setting does to it: a JS API and the <nucleus-playground> element.',
    license: 'MIT OR Apache-2.0',
    type: 'module',
    main: './nucleus.js',
    types: './nucleus.d.ts',
    exports: {
      '.': typed('nucleus.js', 'nucleus.d.ts'),
      './element': typed('nucleus-element.js', 'nucleus-element.d.ts'),
      './trace': typed('trace.js', 'trace.d.ts'),
      './worker': './nucleus-worker.js',
      './sw.js': './sw.js',
      './package.json': './package.json',
      // The assets (wasm modules, CSS, knobs), for bundlers that copy them.
      './*': './*',
    },
    // Importing the element defines <nucleus-playground>.
    sideEffects: ['./nucleus-element.js'],
    files,
    keywords: ['llm', 'language-model', 'webgpu', 'webassembly', 'gguf', 'sampling', 'web-component', 'documentation'],
  };
}

const megabytes = (bytes) => `${(bytes / 1e6).toFixed(2)} MB`;
const gzipped = (file) => gzipSync(readFileSync(file), { level: 9 }).length;

function main([version]) {
  if (!/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(version ?? '')) throw new Error(`usage: node npm/dist.mjs VERSION (got ${version})`);
  const built = /VERSION = '([^']+)'/.exec(readFileSync(path.join(WWW, 'pkg/version.js'), 'utf8'))?.[1];
  if (built !== version) throw new Error(`www/pkg/version.js says ${built}, Cargo.toml ${version}: run ./build.sh web`);
  const runtime = packageFiles();
  const out = path.join(DIST, PACKAGE_NAME);
  rmSync(out, { recursive: true, force: true });
  const copy = (from, to) => {
    mkdirSync(path.dirname(path.join(out, to)), { recursive: true });
    copyFileSync(from, path.join(out, to));
  };
  for (const file of [...runtime, 'sw.js', ...DECLARATIONS]) copy(path.join(WWW, file), file);
  for (const file of LICENCES) copy(path.join(REPO, file), file);
  writeFileSync(path.join(out, 'README.md'), `# ${PACKAGE_NAME}\n\n${readmeSection().replace(/^## .*\n+/, '')}`);
  const files = [...runtime, 'sw.js', ...DECLARATIONS, ...LICENCES, 'README.md'];
  writeFileSync(path.join(out, 'package.json'), `${JSON.stringify(manifest(version, files), null, 2)}\n`);

  const [packed] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', DIST, out],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
  const tarball = path.join(DIST, packed.filename);
  // What a visitor's browser downloads (gzip -9, as a CDN serves it): the element's modules and
  // styles, the sampler, and one engine module; the service worker's install takes every file.
  // Each runtime file compressed once; a download is the sum of its files.
  const compressed = new Map(runtime.map((file) => [file, gzipped(path.join(out, file))]));
  const sum = (files) => files.reduce((total, file) => total + compressed.get(file), 0);
  const page = sum(runtime.filter((file) => !file.startsWith('pkg/nucleus_web')));
  const plain = sum(['pkg/nucleus_web.js', 'pkg/nucleus_web_bg.wasm']);
  const threaded = sum(['pkg/nucleus_web_threads.js', 'pkg/nucleus_web_threads_bg.wasm', 'nucleus-thread.js']);
  const every = sum(runtime);
  console.log(`${path.relative(REPO, out)}/: ${packed.entryCount} files, ${megabytes(packed.unpackedSize)}`);
  console.log(`${path.relative(REPO, tarball)}: ${megabytes(statSync(tarball).size)} packed`);
  console.log(`a first visit downloads, gzipped: ${megabytes(page + threaded)} (the element and the CPU engine's threaded module, `
    + `a cross-origin isolated page), ${megabytes(page + plain)} (the engine's WebGPU and one-thread module), `
    + `${megabytes(every)} (every file, when the service worker is registered); the model is apart (98 MB for the default)`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
