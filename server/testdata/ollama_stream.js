// readStream collects a streamed chat of the ollama npm client: the text of its parts, how many
// there were and the last one (done, counts). Shared by ollama_client.js and ollama_multi_client.js.
async function readStream(stream) {
  let text = '';
  let parts = 0;
  let last;
  for await (const part of stream) {
    text += part.message.content;
    parts++;
    last = part;
  }
  return { text, parts, last };
}

module.exports = { readStream };
