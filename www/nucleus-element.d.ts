// Types of <nucleus-playground> (nucleus-element.js): its attributes and its element. Checked with
// nucleus.d.ts by `tsc --noEmit` (see there).

import type { Backend } from './nucleus.js';

/** Every attribute the element reads, as strings (as HTML gives them). */
export interface NucleusPlaygroundAttributes {
  /** A GGUF URL (same-origin or CORS); default `models/SmolLM2-135M-Instruct.Q4_1.gguf` in `assets`. */
  model?: string;
  /** The model file's SHA-256 (lowercase hex), checked before a cached copy is used. */
  sha256?: string;
  backend?: Backend;
  /** The URL of the package's folder, when a bundler moved the element's module away from it. */
  assets?: string;
  /** The URL of the site's copy of the package's sw.js: registered once per page, for offline use. */
  'service-worker'?: string;
  prompt?: string;
  temperature?: string;
  'top-k'?: string;
  'top-p'?: string;
  'min-p'?: string;
  'typical-p'?: string;
  seed?: string;
  /** 1..=256 (default 16). */
  'max-tokens'?: string;
  mode?: 'inspector' | 'full' | 'compare' | 'score' | 'attention';
  /** Score and attention modes' text (default: the element's own text). */
  text?: string;
  /** Attention mode's layer, 1-based (default the last). */
  layer?: string;
  /** Attention mode's head, 1-based (default the mean of the layer's heads). */
  head?: string;
  /** Compare mode's temperatures, space- or comma-separated (default "0 0.7 1.5"). */
  temperatures?: string;
  /** Present: generate once the model is loaded. */
  autoplay?: '' | boolean;
  /** The URL of a recorded run, replayed at once. */
  trace?: string;
}

export class NucleusPlaygroundElement extends HTMLElement {
  /** `inspector`, `full`, `compare`, `score` or `attention` (the `mode` attribute; anything else is `inspector`). */
  readonly mode: 'inspector' | 'full' | 'compare' | 'score' | 'attention';
  /** The text score and attention modes read: the `text` attribute, else the element's own text. */
  readonly text: string;
  /** The sampling settings the attributes give, each clamped to its range. */
  settings(): { temperature: number; topK: number; topP: number; minP: number; typicalP: number };
  /** Generates (each column in compare mode), in turn with the page's other elements. */
  generate(): Promise<void>;
  /** Score mode: rates the text and draws it (done once the model loads). */
  score(): Promise<void>;
  /** Attention mode: reads the text's attention and draws it (done once the model loads). */
  attend(): Promise<void>;
  setAttribute<K extends keyof NucleusPlaygroundAttributes>(name: K, value: string): void;
  setAttribute(name: string, value: string): void;
}

declare global {
  interface HTMLElementTagNameMap {
    'nucleus-playground': NucleusPlaygroundElement;
  }
}
