// The typed example: the package's API from a bundle, every option of every call, checked by
// `tsc --noEmit` (tsconfig.json) and run in the browser tests against the real package.
import {
  ERROR_CODES, Nucleus, NucleusError, VERSION, registerOffline,
  type ChatCompletion, type ErrorCode, type GenerateOptions, type GenerationResult, type LoadOptions, type Step,
} from 'nucleus-lm';
import 'nucleus-lm/element';
import { loadSampler, runOfTrace, traceOf, type Trace } from 'nucleus-lm/trace';

/** The package's folder: the worker and the wasm modules are not in the bundle. */
const assets = `https://cdn.jsdelivr.net/npm/nucleus-lm@${VERSION}/`;
const model = 'https://models.example.com/SmolLM2-135M-Instruct.Q4_1.gguf';

const status = document.getElementById('status')!;
const output = document.getElementById('output')!;
const report: Record<string, unknown> = { version: VERSION };

const loadOptions: LoadOptions = {
  model,
  assets,
  backend: 'auto',
  // The file's SHA-256: a kept copy that differs is downloaded again, a download that differs refused.
  sha256: 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53',
  onProgress: ({ phase, loaded, total, cached }) => {
    status.textContent = `${phase}${cached ? ' (cached)' : ''}: ${loaded} of ${total} bytes`;
  },
  contextLength: 512,
  memoryBudget: 1 << 30,
  cache: true,
};
const lm = await Nucleus.load(loadOptions);
status.textContent = `${lm.info.title}, on ${lm.info.backend.kind} (${lm.info.backend.threads} threads): ${lm.info.backend.reason}`;
report.backend = lm.info.backend.kind;

// A generation, streamed into the page.
const controller = new AbortController();
const options: GenerateOptions = {
  prompt: 'The capital of France is',
  maxTokens: 8, temperature: 0, topK: 0, topP: 1, minP: 0, typicalP: 1,
  repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, penaltyLastN: 0, penalizePrompt: false,
  dryMultiplier: 0, dryBase: 1.75, dryAllowedLength: 2, dryPenaltyLastN: 0, dryIncludePrompt: true,
  drySequenceBreakers: ['\n', ':', '"', '*'],
  logitBias: { 0: 0 }, stop: ['\n\n'], seed: 42, ignoreEos: false,
  topLogprobs: 5, explain: 3, returnLogits: false, forcedTokens: [],
  speculative: { lookup: { maxDraft: 4, ngram: 3 } },
  signal: controller.signal,
  onPrefill: ({ done, total, cached }) => { status.textContent = `prefill ${done}/${total} (${cached} cached)`; },
};
const steps: Step[] = [];
const generation = lm.generate(options);
for await (const step of generation) {
  steps.push(step);
  output.textContent += step.text;
  output.dataset.steps = String(steps.length);
}
const result: GenerationResult = await generation.result;
report.ids = steps.map((step) => step.id);
report.text = result.text;
report.explained = steps.every((step) => step.explain?.chosen.id === step.id);
// What the declarations say each object holds, for the tests to hold against what it holds.
report.keys = { ModelInfo: Object.keys(lm.info), Step: Object.keys(steps[0]), GenerationResult: Object.keys(result) };

// Structured output, a chat and the OpenAI facade.
const json = await lm.generate({ messages: [{ role: 'user', content: 'A colour?' }], maxTokens: 12,
  responseFormat: { type: 'regex', pattern: '(red|green|blue)' } }).result;
report.regex = json.text;
const completion: ChatCompletion = await lm.chat.completions.create({
  messages: [{ role: 'system', content: 'Answer in one word.' }, { role: 'user', content: 'Hi' }],
  max_tokens: 2, temperature: 0, top_p: 1, top_k: 0, stop: ['\n'], seed: 1, logprobs: true, top_logprobs: 2,
  frequency_penalty: 0, presence_penalty: 0, logit_bias: { 0: 0 }, response_format: { type: 'text' },
});
report.completion = completion.choices[0].finish_reason;
const stream = await lm.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], stream: true,
  stream_options: { include_usage: true }, max_completion_tokens: 2 });
let chunks = 0;
for await (const chunk of stream) chunks += chunk.choices.length + (chunk.usage ? 1 : 0);
report.chunks = chunks;

// The logit lens, beam search, scoring, attention, the tokenizer, a trace, what the engine holds, the stored models.
const lens = await lm.logitLens({ prompt: 'The capital of France is', generated: [], candidates: 3 });
report.lensLayers = lens.layers.length;
const beams = await lm.beamSearch({ prompt: 'The capital of France is', beams: 2, maxTokens: 2, lengthPenalty: 1, ignoreEos: false });
report.beams = beams.hypotheses.length;
const scored = await lm.score('The capital of France is Paris.', { topK: 2 });
report.scoredRanks = scored.tokens.map((token) => token.rank ?? null);
const attention = await lm.attention({ prompt: 'The capital of France is', layer: 30, head: 1, from: 0, to: 5 });
report.attentionRows = attention.rows.map((row) => row.weights.length);
const legacy = await lm.completions.create({ prompt: 'The capital of France is', max_tokens: 0, echo: true, logprobs: 1 });
report.legacyTokens = legacy.choices[0].logprobs?.tokens.length ?? null;
report.tokens = await lm.tokenize('Hello world');
await loadSampler(assets);
const trace: Trace = traceOf({ request: { prompt: options.prompt! }, settings: { temperature: 0 }, steps, result }, lm.info);
report.generator = trace.generator;
report.replayed = runOfTrace(JSON.stringify(trace)).run.steps.length;
report.liveBytes = (await lm.diagnostics()).wasmMemoryBytes > 0;
report.stored = (await Nucleus.storedModels()).models.some((stored) => stored.url === model);

// Errors are typed: a bad option names itself.
try {
  await lm.generate({ prompt: 'x', topP: 2 }).result;
} catch (error) {
  const code: ErrorCode = (error as NucleusError).code;
  report.error = `${code}: ${(error as NucleusError).option}`;
  report.codeDocumented = code in ERROR_CODES;
}

// The service worker, where the site hosts its copy (sw.js from the package) beside this page.
report.offline = (await registerOffline('sw.js', { assets })) !== null;
await Nucleus.removeStoredModel('https://example.com/never-stored.gguf');
controller.abort();
lm.dispose();

// The element is typed too: `querySelector` knows its tag.
report.elementMode = document.querySelector('nucleus-playground')?.mode;

document.body.dataset.report = JSON.stringify(report);
status.textContent = 'Done.';
