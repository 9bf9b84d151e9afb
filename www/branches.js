// Forks of a run: the same prompt and settings, the run's tokens up to one step, another of that
// step's candidates in its place, then the model's own continuation. The engine takes the tokens
// before the new one from its KV cache (the request's `forcedTokens`), so a fork runs one token
// before its first new step. The playground keeps a run and its forks as a tree, drawn here as
// nested lists of buttons, one per branch.

import { shownToken } from './chart.js';

/**
 * The steps a fork of `parent` at step `at` with `candidate` (one of that step's `top`) begins
 * with: the parent's steps before it, then that step with the candidate as its choice (the same
 * distribution: the context up to it is the parent's), marked `forced`.
 */
export function forkPrefix(parent, at, candidate) {
  const { explain, finishReason, ...step } = parent.steps[at];
  const forced = { ...step, id: candidate.id, token: candidate.text, text: candidate.text, logprob: candidate.logprob, forced: true };
  return [...parent.steps.slice(0, at), forced];
}

/** The request of a fork that begins with `prefix` (its ids given, not sampled). */
export const forkOptions = (parent, prefix) => ({ ...parent.options, forcedTokens: prefix.map((step) => step.id) });

/** Records `run` as a fork of `parent` at step `at`: every run of a tree lists the tree's branches. */
export function addFork(parent, run, at) {
  const root = parent.root ?? parent;
  root.branches ??= [root];
  Object.assign(run, { root, parent, at, branches: root.branches });
  root.branches.push(run);
}

/** A branch's text, cut to a line. */
function preview(run) {
  const text = run.steps.map((step) => step.token).join('');
  return shownToken(text.length > 48 ? `${text.slice(0, 47)}…` : text);
}

/**
 * Draws the tree of `shown` (the run on show) into `list` (a <ul>), each branch a button that
 * calls `onShow(run)`; hidden while the run has no forks.
 */
export function drawBranches(list, shown, onShow) {
  const root = shown?.root ?? shown;
  const branches = root?.branches ?? [];
  list.hidden = branches.length < 2;
  if (list.hidden) {
    list.replaceChildren();
    return;
  }
  const item = (run) => {
    const li = document.createElement('li');
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'branch';
    button.setAttribute('aria-pressed', String(run === shown));
    button.dataset.branch = String(branches.indexOf(run));
    const origin = run.parent
      ? `step ${run.at + 1}: “${shownToken(run.steps[run.at].token)}” instead of “${shownToken(run.parent.steps[run.at].token)}”`
      : 'the first run';
    button.textContent = `${origin} · ${preview(run)}`;
    button.addEventListener('click', () => onShow(run));
    li.append(button);
    const children = branches.filter((other) => other.parent === run);
    if (children.length) {
      const nested = document.createElement('ul');
      nested.append(...children.map(item));
      li.append(nested);
    }
    return li;
  };
  list.replaceChildren(item(root));
}
