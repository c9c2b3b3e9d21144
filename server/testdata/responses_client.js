// Drives a ubatch server's /v1/responses with the official OpenAI Node client (npm "openai");
// run by TestResponsesNodeClient with BASE_URL set. Prints one JSON object with what each call
// returned.
const OpenAI = require("openai");
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "none", maxRetries: 0 });
const model = "stories";

function summary(r) {
  return { id: r.id, status: r.status, text: r.output_text, usage: r.usage, incomplete: r.incomplete_details,
    instructions: r.instructions, previous: r.previous_response_id, output_types: r.output.map((o) => o.type) };
}

async function main() {
  const out = {};
  const plain = await client.responses.create({ model, input: "Once upon a time", max_output_tokens: 12, temperature: 0 });
  out.plain = summary(plain);

  // Streamed: every event as it comes, the text deltas joined, the final response's text.
  const stream = await client.responses.create({ model, input: "Once upon a time", max_output_tokens: 12, temperature: 0, stream: true });
  const types = [];
  let deltas = "", final = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === "response.output_text.delta") deltas += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
  }
  const msg = final.output.find((o) => o.type === "message");
  out.stream = { types, deltas, status: final.status, text: msg ? msg.content[0].text : null, usage: final.usage };

  // The SDK's stream helper rebuilds the response from the events (and checks their indexes).
  const helper = client.responses.stream({ model, input: "Once upon a time", max_output_tokens: 12, temperature: 0 });
  let helperDeltas = "";
  helper.on("response.output_text.delta", (ev) => { helperDeltas += ev.delta; });
  const rebuilt = await helper.finalResponse();
  // (finalResponse has no output_text, the SDK adds it to created responses only: join the parts.)
  const rebuiltText = rebuilt.output.filter((o) => o.type === "message")
    .map((o) => o.content.map((c) => c.text).join("")).join("");
  out.helper = { deltas: helperDeltas, text: rebuiltText };

  const instructed = await client.responses.create({ model, instructions: "Tell a story.", input: "Once upon a time",
    max_output_tokens: 12, temperature: 0 });
  out.instructions = summary(instructed);

  // A tool call, then its output sent back after previous_response_id.
  const tools = [{ type: "function", name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] }, strict: true }];
  const called = await client.responses.create({ model, input: "Weather in Paris?", tools, tool_choice: "required",
    max_output_tokens: 160, temperature: 0 });
  const call = called.output.find((o) => o.type === "function_call");
  out.call = { response: summary(called), call };
  const followed = await client.responses.create({ model, previous_response_id: called.id, tools, max_output_tokens: 8, temperature: 0,
    input: [{ type: "function_call_output", call_id: call.call_id, output: "22C and sunny" }] });
  out.follow = summary(followed);

  // An unknown previous response is the SDK's BadRequestError.
  try {
    await client.responses.create({ model, input: "x", previous_response_id: "resp_unknown" });
    out.unknown = "no error";
  } catch (e) {
    out.unknown = { status: e.status, code: e.code, param: e.param };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
