// A docs generator's build, as MkDocs, Jekyll, Hugo or VitePress do it: each Markdown page rendered
// (raw HTML passed through, as CommonMark allows) into the site's layout.
//
//   node build.mjs OUT_DIR
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { marked } from 'marked';

const [out = 'site'] = process.argv.slice(2);
const page = readFileSync(new URL('guide.md', import.meta.url), 'utf8');
const title = /^# (.*)$/m.exec(page)[1];
const layout = readFileSync(new URL('layout.html', import.meta.url), 'utf8');
mkdirSync(out, { recursive: true });
writeFileSync(`${out}/guide.html`, layout.replace('{{title}}', () => title).replace('{{content}}', () => marked.parse(page)));
