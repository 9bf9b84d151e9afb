// A helper thread of the CPU engine's threaded build: a Web Worker the page starts when the
// engine's worker asks (protocol.js, HelpersReply). It instantiates the same wasm module on the
// same shared memory, then gives its thread to the engine's pool (`runThreadHelper`, which never
// returns: it takes the engine's tasks, spinning between them and parking when idle). The page
// ends it with the engine's worker.

self.onmessage = async ({ data: { script, module, memory } }) => {
  self.onmessage = null;
  try {
    const engine = await import(script);
    await engine.default({ module_or_path: module, memory });
    engine.runThreadHelper();
  } catch (error) {
    self.postMessage({ error: `${error.name}: ${error.message}` });
  }
};
