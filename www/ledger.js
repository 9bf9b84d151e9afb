// The speculative ledger of a run decoded with prompt lookup: for each verification pass, the
// tokens it drafted, which the model accepted (green, ✓), which it rejected (red, ✗; the sampler
// drew another token there) and which it never reached (grey), then the token the pass added
// after the accepted ones. From the steps' `draft` reports: the first step a pass yields carries
// its pass's, and the pass's steps are its accepted drafts, then that one more token.

import { shownToken } from './chart.js';

/**
 * The passes of `steps`: `{ first, drafted: [{ id, text, targetProb, verdict }], accepted, added }`,
 * `first` the index of the pass's first step, `added` the step after its accepted drafts (the
 * rejected draft's replacement or, when all were accepted, one more token; null when the run
 * ended on an accepted draft).
 */
export function ledgerOf(steps) {
  return steps.flatMap((step, first) => (step.draft
    ? [{ first, drafted: step.draft.tokens, accepted: step.draft.accepted, added: steps[first + step.draft.accepted] ?? null }]
    : []));
}

const VERDICTS = {
  accepted: { mark: '✓', words: 'accepted' },
  rejected: { mark: '✗', words: 'rejected' },
  not_reached: { mark: '', words: 'not reached (after a rejection)' },
};

/**
 * Draws the ledger of `steps` into `list` (an <ol>) and says in `summary` what speculation did
 * over the run (`result.speculation`, once the run has ended). Returns the number of passes.
 */
export function drawLedger(list, summary, steps, result) {
  const passes = ledgerOf(steps);
  list.replaceChildren(...passes.map((pass) => {
    const item = document.createElement('li');
    item.className = 'ledger-pass';
    item.dataset.first = pass.first;
    item.dataset.accepted = pass.accepted;
    const where = document.createElement('span');
    where.className = 'ledger-step';
    where.textContent = `step ${pass.first + 1}`;
    item.append(where);
    for (const token of pass.drafted) {
      const verdict = VERDICTS[token.verdict];
      const chip = document.createElement('span');
      chip.className = `draft ${token.verdict}`;
      chip.dataset.verdict = token.verdict;
      chip.dataset.id = token.id;
      chip.textContent = `${shownToken(token.text)}${verdict.mark ? ` ${verdict.mark}` : ''}`;
      chip.title = token.verdict === 'not_reached'
        ? verdict.words
        : `${verdict.words}: the model gave it p ${token.targetProb.toFixed(3)} here`;
      item.append(chip);
    }
    if (pass.added) {
      const arrow = document.createElement('span');
      arrow.className = 'ledger-arrow';
      arrow.textContent = pass.accepted < pass.drafted.length ? 'drew instead' : 'then';
      const added = document.createElement('span');
      added.className = `draft added ${pass.accepted < pass.drafted.length ? 'replacement' : 'bonus'}`;
      added.dataset.id = pass.added.id;
      added.textContent = shownToken(pass.added.token);
      item.append(arrow, added);
    }
    return item;
  }));
  const stats = result?.speculation;
  if (!passes.length) {
    summary.textContent = stats
      ? 'No pass had a draft: no n-gram of this run recurred in its context, so each step decoded one token.'
      : '';
  } else if (stats) {
    const percent = (stats.acceptanceRate * 100).toFixed(0);
    summary.textContent = `${stats.verifyPasses} of ${stats.decodePasses} decode passes verified a draft: `
      + `${stats.acceptedTokens} of ${stats.draftedTokens} drafted tokens accepted (${percent} %), `
      + `${stats.tokensPerPass.toFixed(2)} tokens per pass, decode ${result.timing.decodeTokensPerS.toFixed(2)} tok/s.`;
  } else {
    summary.textContent = `${passes.length} verification passes so far.`;
  }
  return passes.length;
}
