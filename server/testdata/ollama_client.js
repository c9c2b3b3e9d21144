// Drives the official ollama npm client against the server at OLLAMA_HOST and prints what it
// got as one JSON object (read by TestOllamaNodeClient).
const { Ollama } = require('ollama');
const { readStream } = require('./ollama_stream.js');

const o = new Ollama({ host: process.env.OLLAMA_HOST });
const messages = [{ role: 'user', content: 'Once upon a time' }];
const options = { num_predict: 8, seed: 1 };

(async () => {
  const out = {};
  const list = await o.list();
  out.list = list.models.map((m) => ({ name: m.name, model: m.model, size: m.size, digest: m.digest,
    format: m.details.format, family: m.details.family, quant: m.details.quantization_level,
    params: m.details.parameter_size, modified: !isNaN(new Date(m.modified_at)) }));
  const show = await o.show({ model: 'stories' });
  out.show = { arch: show.model_info['general.architecture'], format: show.details.format,
    template: typeof show.template, capabilities: show.capabilities };
  const chat = await o.chat({ model: 'stories', messages, options });
  out.chat = { role: chat.message.role, content: chat.message.content, done: chat.done,
    done_reason: chat.done_reason, eval_count: chat.eval_count, prompt_eval_count: chat.prompt_eval_count,
    total_duration: chat.total_duration };
  const stream = await o.chat({ model: 'stories', messages, options, stream: true });
  const { text, parts, last } = await readStream(stream);
  out.stream = { text, parts, done: last.done, eval_count: last.eval_count, eval_duration: last.eval_duration };
  const gen = await o.generate({ model: 'stories', prompt: 'Once upon a time', raw: true, options });
  out.generate = { response: gen.response, done: gen.done, eval_count: gen.eval_count,
    prompt_eval_count: gen.prompt_eval_count, context: gen.context.length };
  const emb = await o.embed({ model: 'stories', input: ['a cat', 'the dog ran'] });
  out.embed = { n: emb.embeddings.length, dim: emb.embeddings[0].length, count: emb.prompt_eval_count };
  const ps = await o.ps();
  out.ps = ps.models.map((m) => ({ name: m.name, size: m.size, expires: !isNaN(new Date(m.expires_at)) }));
  out.version = (await o.version()).version;
  try {
    await o.chat({ model: 'no-such-model', messages });
    out.unknown = 'no error';
  } catch (e) {
    out.unknown = { name: e.name, status: e.status_code, error: e.error };
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
