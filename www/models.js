// The playground's model picker: which model the page runs (the default, Gemma 3 270M, a file with
// Qwen3.5-0.8B's shapes and random weights, a GGUF file
// on this computer, a GGUF at a URL), kept between visits (localStorage; a URL model in the link
// too), and the models this browser keeps, each with its size and a button to remove it, against
// the site's storage quota. Loading and switching are the page's (playground.js); this module
// only knows the choices. Built on the public API (nucleus.js).

import { DEFAULT_MODEL_URL, Nucleus } from './nucleus.js';
import { LOCAL_MODELS } from './protocol.js';

/** The models the picker offers by name (`./build.sh serve` serves them all). */
export const KNOWN_MODELS = Object.freeze([
  { id: 'default', label: 'SmolLM2-135M-Instruct (the default, 98 MB)', url: DEFAULT_MODEL_URL },
  {
    id: 'gemma3',
    label: 'Gemma 3 270M (a base model, 253 MB)',
    url: new URL('models/gemma-3-270m-q4_k_m.gguf', import.meta.url).href,
  },
  {
    id: 'qwen35',
    label: 'Qwen3.5 0.8B shape (random weights, 527 MB)',
    url: new URL('models/qwen35-0.8b-shape-q4_k_m.gguf', import.meta.url).href,
  },
]);

/** The picker's other entries: the model loaded when it is none of the known ones, and actions. */
export const LOADED_CHOICE = 'loaded';
export const FILE_CHOICE = 'file';
export const URL_CHOICE = 'url';

/** The link's parameter naming a model by URL. */
export const MODEL_PARAM = 'model';
const CHOICE_KEY = 'nucleus-playground-model';

/**
 * What to load: `{ id, url }` (a known model, or a URL; a kept file's key is a URL too), or
 * `{ id: FILE_CHOICE, file }` (a file given to the page). `label` says it in words.
 * @typedef {{ id: string, url?: string, file?: File, label: string }} ModelChoice
 */

/** The known model with `id`, as a choice. */
export function knownChoice(id) {
  const known = KNOWN_MODELS.find((model) => model.id === id) ?? KNOWN_MODELS[0];
  return { id: known.id, url: known.url, label: known.label };
}

/** A model at `url` (typed by a person, in a link, or a kept file's key), as a choice. */
export function urlChoice(url) {
  const known = KNOWN_MODELS.find((model) => model.url === url);
  if (known) return knownChoice(known.id);
  const { pathname } = new URL(url);
  const name = decodeURIComponent(pathname.split('/').pop() || url);
  const local = pathname.includes(`/${LOCAL_MODELS}/`);
  return { id: local ? FILE_CHOICE : URL_CHOICE, url, label: local ? `${name} (from this computer)` : name };
}

/** The choice to start with: the link's `model=` URL, else the one kept, else the default. */
export function initialChoice() {
  const linked = new URLSearchParams(location.search).get(MODEL_PARAM);
  if (linked) {
    try {
      return urlChoice(new URL(linked, location.href).href);
    } catch {
      // Not a URL: the default, and the page says why (see linkProblem).
    }
  }
  try {
    const kept = JSON.parse(localStorage.getItem(CHOICE_KEY) ?? 'null');
    if (kept?.url) return urlChoice(kept.url);
  } catch {
    // Storage off or unreadable: the default.
  }
  return knownChoice('default');
}

/** What is wrong with the link's `model=`, if anything. */
export function linkProblem() {
  const linked = new URLSearchParams(location.search).get(MODEL_PARAM);
  if (!linked) return null;
  try {
    new URL(linked, location.href);
    return null;
  } catch {
    return `${MODEL_PARAM}=${linked} (must be a URL)`;
  }
}

/**
 * Keeps the choice of a loaded model (`url`: where it loaded from, a file's key included) for the
 * next visit, and a URL model in the link; a known model leaves the link without `model=`.
 */
export function rememberChoice(url) {
  try {
    localStorage.setItem(CHOICE_KEY, JSON.stringify({ url }));
  } catch {
    // Storage can be off (some private windows): the choice lives in the link only.
  }
  const params = new URLSearchParams(location.search);
  if (KNOWN_MODELS.some((model) => model.url === url)) params.delete(MODEL_PARAM);
  else params.set(MODEL_PARAM, url);
  history.replaceState(null, '', `${location.pathname}?${params}${location.hash}`);
}

/**
 * Fills the picker's select: the known models, the model `loaded` when it is none of them, then
 * a file and a URL (actions: picking one asks for the file or the URL); `loaded` is selected.
 */
export function fillPicker(select, loaded = null) {
  const known = KNOWN_MODELS.some((model) => model.id === loaded?.id);
  const other = loaded && !known ? [new Option(`${loaded.label} (loaded)`, LOADED_CHOICE)] : [];
  select.replaceChildren(
    ...KNOWN_MODELS.map(({ id, label }) => new Option(label, id)),
    ...other,
    new Option('A GGUF file on this computer…', FILE_CHOICE),
    new Option('A GGUF at a URL…', URL_CHOICE),
  );
  select.value = !loaded ? KNOWN_MODELS[0].id : known ? loaded.id : LOADED_CHOICE;
}

const megabytes = (bytes) => `${(bytes / 1e6).toLocaleString('en', { maximumFractionDigits: bytes < 1e7 ? 1 : 0 })} MB`;

/**
 * Lists the models this browser keeps in `tbody` (the one at `currentUrl` marked), each with Load
 * and Remove; `summary` and `quota` say how many, how much, and how much the site may keep. Resolves
 * to the list.
 */
export async function showStoredModels({ tbody, summary, quota, currentUrl, onLoad, onRemoved }) {
  const stored = await Nucleus.storedModels();
  tbody.replaceChildren(...stored.models.map((model) => {
    const row = document.createElement('tr');
    const name = document.createElement('td');
    name.textContent = `${model.name}${model.local ? ' (a file from this computer)' : ''}`;
    if (model.url === currentUrl) {
      name.classList.add('current');
      name.append(' — loaded');
    }
    const size = document.createElement('td');
    size.textContent = megabytes(model.bytes);
    const actions = document.createElement('td');
    const load = Object.assign(document.createElement('button'), { type: 'button', textContent: 'Load' });
    load.setAttribute('aria-label', `Load ${model.name}`);
    load.disabled = model.url === currentUrl;
    load.addEventListener('click', () => onLoad(urlChoice(model.url)));
    const remove = Object.assign(document.createElement('button'), { type: 'button', textContent: 'Remove' });
    remove.setAttribute('aria-label', `Remove ${model.name} from this browser`);
    remove.addEventListener('click', async () => {
      await Nucleus.removeStoredModel(model.url);
      onRemoved(model);
    });
    actions.append(load, remove);
    row.append(name, size, actions);
    return row;
  }));
  const total = stored.models.reduce((sum, model) => sum + model.bytes, 0);
  const count = stored.models.length;
  summary.textContent = count ? `(${count}, ${megabytes(total)})` : '(none)';
  quota.textContent = stored.quota
    ? `This site keeps ${megabytes(stored.usage ?? total)} of the ${megabytes(stored.quota)} this browser lets it keep;`
      + ' a model that does not fit is not kept (the page says so) and never pushes another out.'
    : 'This browser does not say how much this site may keep.';
  return stored;
}

/**
 * Makes the whole page a drop target for GGUF files: `zone` shows while a file is dragged over it;
 * `onFile(file)` gets the first file dropped.
 */
export function acceptDroppedFiles(zone, onFile) {
  let depth = 0;
  const carriesFiles = (event) => [...(event.dataTransfer?.types ?? [])].includes('Files');
  document.addEventListener('dragenter', (event) => {
    if (!carriesFiles(event)) return;
    depth += 1;
    zone.hidden = false;
  });
  document.addEventListener('dragleave', (event) => {
    if (!carriesFiles(event)) return;
    depth = Math.max(0, depth - 1);
    if (depth === 0) zone.hidden = true;
  });
  document.addEventListener('dragover', (event) => {
    if (carriesFiles(event)) event.preventDefault();
  });
  document.addEventListener('drop', (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    depth = 0;
    zone.hidden = true;
    const [file] = event.dataTransfer.files;
    if (file) onFile(file);
  });
}
