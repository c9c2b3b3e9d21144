// Drives a one-model ubatch front with the official OpenAI Node client as an app written for
// OpenAI does: hard-coded OpenAI model names. Run by TestOpenAINodeClientAnyName with BASE_URL
// set. Prints one JSON object with what each call returned.
const OpenAI = require("openai");
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "none" });

async function main() {
  const out = {};
  const chat = await client.chat.completions.create({
    model: "gpt-4o-mini", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4, temperature: 0,
  });
  out.chat_model = chat.model;
  out.chat_text = chat.choices[0].message.content;
  out.chat_finish = chat.choices[0].finish_reason;
  // The client asks for base64 and decodes it; dimensions shortens the vector.
  const emb = await client.embeddings.create({ model: "text-embedding-3-small", input: "a story", dimensions: 8 });
  out.embed_model = emb.model;
  out.embedding = emb.data[0].embedding;
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => { process.stderr.write(String(e.stack || e)); process.exit(1); });
