// Drives a ubatch server with the official OpenAI Node client (npm "openai"); run by
// TestOpenAINodeClient with BASE_URL set. Prints one JSON object with what each call returned.
const OpenAI = require("openai");
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "none" });

async function main() {
  const out = {};
  const model = await client.models.retrieve("stories");
  out.model = model.id;

  const tools = [{
    type: "function",
    function: {
      name: "get_weather",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] },
    },
  }];
  const withTools = await client.chat.completions.create({
    model: "stories", messages: [{ role: "user", content: "Weather in Paris?" }],
    tools, tool_choice: "required", max_tokens: 96, temperature: 0,
  });
  out.tool_calls = withTools.choices[0].message.tool_calls;
  out.tool_finish = withTools.choices[0].finish_reason;

  const schema = { type: "object", properties: { name: { type: "string", maxLength: 16 }, age: { type: "integer" } }, required: ["name", "age"] };
  const structured = await client.chat.completions.create({
    model: "stories", messages: [{ role: "user", content: "Tell me about a girl." }],
    response_format: { type: "json_schema", json_schema: { name: "person", schema, strict: true } },
    max_tokens: 96, temperature: 0,
  });
  out.structured = structured.choices[0].message.content;

  const stream = await client.chat.completions.create({
    model: "stories", messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = "", usage = null;
  for await (const chunk of stream) {
    if (chunk.choices.length > 0 && chunk.choices[0].delta.content) text += chunk.choices[0].delta.content;
    if (chunk.usage) usage = chunk.usage;
  }
  out.stream_text = text;
  out.stream_usage = usage;

  const emb = await client.embeddings.create({ model: "stories", input: ["Once upon a time"] });
  out.embedding_len = emb.data[0].embedding.length;
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(String(e)); process.exit(1); });
