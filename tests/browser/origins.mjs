// The package as a documentation site uses it, across three local origins: the site's pages on
// one (cross-origin isolated; the examples carry README.md's Content Security Policy in a meta
// tag), the package on a second as a CDN serves it (CORS), the model on a third (CORS). The
// examples' public URLs (jsDelivr, models.example.com) are rewritten to those origins as the
// site's pages are served. Shared by package.test.mjs (Chromium, every example) and
// engines.test.mjs (the static page in every engine).

import { MODEL_NAME, MODEL_PATH, startOrigin } from './server.mjs';
import { PACKAGE_NAME } from '../package/fresh.mjs';

export const CDN = 'https://cdn.jsdelivr.net';
export const MODEL_HOST = 'https://models.example.com';

/** Where a CDN serves `version` of the package. */
export const packagePath = (version) => `/npm/${PACKAGE_NAME}@${version}/`;

/**
 * The three origins: `cdn` serving `cdnRoutes` (see startOrigin), `models` the default model at
 * `/<its name>`, `site` serving `siteRoutes` with the public URLs rewritten. Resolves to
 * `{ site, cdn, models, close }`.
 */
export async function startOrigins({ cdnRoutes, siteRoutes }) {
  const cdn = await startOrigin({ cors: true, routes: cdnRoutes });
  const models = await startOrigin({ cors: true, routes: { [`/${MODEL_NAME}`]: MODEL_PATH } });
  const site = await startOrigin({
    isolated: true,
    rewrite: [[`${CDN}/`, cdn.url], [CDN, cdn.url.slice(0, -1)], [`${MODEL_HOST}/`, models.url], [MODEL_HOST, models.url.slice(0, -1)]],
    routes: siteRoutes,
  });
  return {
    site, cdn, models,
    async close() {
      for (const server of [site, cdn, models]) await server.close();
    },
  };
}
