// Drives the official ollama npm client against a server of several models at OLLAMA_HOST,
// choosing the model per request, and prints what it got as one JSON object (read by
// TestOllamaNodeClientModels).
const { Ollama } = require('ollama');
const { readStream } = require('./ollama_stream.js');

const o = new Ollama({ host: process.env.OLLAMA_HOST });
const messages = [{ role: 'user', content: 'Once upon a time' }];
const options = { num_predict: 6, seed: 1 };

(async () => {
  const out = { ps: {} };
  out.psBefore = (await o.ps()).models.map((m) => m.name);
  const list = await o.list();
  out.list = list.models.map((m) => ({ name: m.name, family: m.details.family, quant: m.details.quantization_level }));
  out.show = {};
  out.stream = {};
  out.generate = {};
  out.embed = {};
  for (const model of ['alpha', 'beta']) {
    const show = await o.show({ model });
    out.show[model] = show.model_info['general.architecture'];
    const stream = await o.chat({ model, messages, options, stream: true });
    const { text, parts, last } = await readStream(stream);
    out.stream[model] = { text, parts, done: last.done, model: last.model, eval_count: last.eval_count };
    const gen = await o.generate({ model, prompt: 'Once upon a time', raw: true, options });
    out.generate[model] = { response: gen.response, model: gen.model, eval_count: gen.eval_count };
    const emb = await o.embed({ model, input: ['a cat', 'the dog ran'] });
    out.embed[model] = { n: emb.embeddings.length, dim: emb.embeddings[0].length };
    out.ps[model] = (await o.ps()).models.map((m) => m.name);
  }
  // keep_alive 0: the model is unloaded once the answer is given.
  await o.generate({ model: 'alpha', prompt: 'a', raw: true, options, keep_alive: 0 });
  out.psAfter = (await o.ps()).models.map((m) => m.name);
  out.unknown = {};
  for (const [what, call] of [['chat', () => o.chat({ model: 'no-such-model', messages })],
    ['generate', () => o.generate({ model: 'no-such-model', prompt: 'a' })],
    ['embed', () => o.embed({ model: 'no-such-model', input: 'a' })],
    ['show', () => o.show({ model: 'no-such-model' })]]) {
    try {
      await call();
      out.unknown[what] = 'no error';
    } catch (e) {
      out.unknown[what] = { name: e.name, status: e.status_code, error: e.error };
    }
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
