// check.mjs: the official `openai` npm client, unmodified, against a running
// `turbospark serve` (started by tests/test_server.c: server.openai_npm_client,
// on loopback, with the bundled default model).
//
//   OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 TS_MODEL=default node tests/openai/check.mjs
//
// Owns: black-box checks of what a new user's code sees through the client:
// models, chat (greedy repeatability, usage arithmetic), streaming with usage
// (deltas add up to the non-streamed reply), completions, logprobs and
// logit_bias (streamed entries equal the whole list), a tool-calling
// conversation whose history carries string arguments (what the client's own
// types say), tool_choice (a named function, "required", "none"; streamed
// calls equal the whole ones), reasoning_content, seeds, aborts (the server stops generating),
// response_format json_schema (a finished reply follows the schema), and the
// errors the client raises for refused requests. Each check asserts
// something that could fail. Prints one line per check and "N passed, N
// failed"; exits 1 on any failure.
//
// Bounded: every request has a 60 s timeout; no retries (maxRetries 0), so
// a 503 shows as a failure instead of a slow pass.
import OpenAI from "openai";

const baseURL = process.env.OPENAI_BASE_URL;
const MODEL = process.env.TS_MODEL || "default";
if (!baseURL || !/^http:\/\/127\.0\.0\.1:\d+\/v1$/.test(baseURL)) {
  console.error("check.mjs: OPENAI_BASE_URL must be http://127.0.0.1:PORT/v1 (loopback only)");
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const root = baseURL.replace(/\/v1$/, "");

let passed = 0, failed = 0;
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`  ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`  FAIL ${name}: ${e && e.stack ? e.stack.split("\n").slice(0, 3).join(" | ") : e}`);
  }
}

async function metric(name) {
  const t = await (await fetch(`${root}/metrics`)).text();
  const m = t.match(new RegExp(`^${name} (\\S+)$`, "m"));
  return m ? Number(m[1]) : NaN;
}

const NOTHINK = { chat_template_kwargs: { enable_thinking: false } };
const userMsg = [{ role: "user", content: "Tell me a story about a cat." }];

await check("models.list and models.retrieve", async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert(ids.length === 1 && ids[0] === MODEL, `ids ${JSON.stringify(ids)}`);
  const m = await client.models.retrieve(MODEL);
  assert(m.id === MODEL && m.object === "model", JSON.stringify(m));
});

let greedy = null;
await check("chat: greedy repeats, usage adds up", async () => {
  const req = { model: MODEL, messages: userMsg, max_tokens: 24, temperature: 0, ...NOTHINK };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  const c = a.choices[0];
  assert(a.object === "chat.completion" && c.message.role === "assistant", JSON.stringify(a));
  assert(typeof c.message.content === "string" && c.message.content.length > 0, "empty content");
  assert(c.message.content === b.choices[0].message.content, "greedy differs between two identical requests");
  assert(["stop", "length"].includes(c.finish_reason), `finish ${c.finish_reason}`);
  const u = a.usage;
  assert(u.prompt_tokens > 5 && u.completion_tokens > 0 && u.completion_tokens <= 24, JSON.stringify(u));
  assert(u.total_tokens === u.prompt_tokens + u.completion_tokens, JSON.stringify(u));
  assert(c.finish_reason !== "length" || u.completion_tokens === 24, "length before max_tokens");
  greedy = a;
});

await check("chat: streaming with usage adds up to the reply", async () => {
  assert(greedy, "no greedy reply to compare");
  const stream = await client.chat.completions.create({
    model: MODEL, messages: userMsg, max_tokens: 24, temperature: 0, ...NOTHINK,
    stream: true, stream_options: { include_usage: true },
  });
  let text = "", finish = null, usage = null, chunks = 0, role = null;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    const d = ch.choices[0];
    if (!d) continue;
    if (d.delta.role) role = d.delta.role;
    if (d.delta.content) text += d.delta.content;
    if (d.finish_reason) finish = d.finish_reason;
  }
  assert(role === "assistant", `role ${role}`);
  assert(text === greedy.choices[0].message.content, `streamed '${text}' vs '${greedy.choices[0].message.content}'`);
  assert(finish === greedy.choices[0].finish_reason, `finish ${finish}`);
  assert(usage && usage.completion_tokens === greedy.usage.completion_tokens &&
         usage.prompt_tokens === greedy.usage.prompt_tokens, `usage ${JSON.stringify(usage)}`);
  assert(chunks > 3, `${chunks} chunks`);
});

await check("completions: text, streamed the same", async () => {
  const req = { model: MODEL, prompt: "Once upon a time", max_tokens: 20, temperature: 0 };
  const a = await client.completions.create(req);
  assert(a.object === "text_completion" && a.choices[0].text.length > 0, JSON.stringify(a));
  assert(a.usage.completion_tokens > 0 && a.usage.completion_tokens <= 20, JSON.stringify(a.usage));
  let text = "";
  for await (const ch of await client.completions.create({ ...req, stream: true })) text += ch.choices[0]?.text ?? "";
  assert(text === a.choices[0].text, `streamed '${text}' vs '${a.choices[0].text}'`);
});

// A logprobs token names its bytes: the text when they are UTF-8, else "bytes:\xNN...".
function tokenBytesMatch(t) {
  const b = Buffer.from(t.bytes);
  if (t.token.startsWith("bytes:")) {
    const hex = t.token.slice(6).split("\\x").slice(1).map((h) => parseInt(h, 16));
    return JSON.stringify(hex) === JSON.stringify(t.bytes) && b.toString("utf8").includes("\ufffd");
  }
  return b.toString("utf8") === t.token;
}

await check("chat: logprobs and top_logprobs, streamed the same", async () => {
  const req = { model: MODEL, messages: userMsg, max_tokens: 24, temperature: 0, ...NOTHINK, logprobs: true, top_logprobs: 3 };
  const a = await client.chat.completions.create(req);
  const c = a.choices[0], content = c.logprobs && c.logprobs.content;
  assert(Array.isArray(content), `logprobs ${JSON.stringify(c.logprobs)}`);
  // every generated token but a final stop token
  const want = a.usage.completion_tokens - (c.finish_reason === "stop" ? 1 : 0);
  assert(content.length === want, `${content.length} entries, ${want} expected`);
  for (const [i, e] of content.entries()) {
    assert(e.logprob <= 0 && tokenBytesMatch(e), `entry ${i}: ${JSON.stringify(e)}`);
    assert(e.top_logprobs.length === 3, `entry ${i}: ${e.top_logprobs.length} alternatives`);
    assert(e.top_logprobs.every((t, k) => tokenBytesMatch(t) && (k === 0 || t.logprob <= e.top_logprobs[k - 1].logprob)),
           `entry ${i}: alternatives ${JSON.stringify(e.top_logprobs)}`);
    assert(e.token === e.top_logprobs[0].token && e.logprob === e.top_logprobs[0].logprob, `entry ${i}: greedy is not the most likely`);
  }
  const got = [];
  for await (const ch of await client.chat.completions.create({ ...req, stream: true })) {
    const lp = ch.choices[0]?.logprobs;
    if (lp) got.push(...lp.content);
  }
  assert(JSON.stringify(got) === JSON.stringify(content), "the streamed entries differ");
  const b = await client.chat.completions.create({ ...req, logprobs: undefined, top_logprobs: undefined });
  assert(b.choices[0].logprobs === null, "logprobs without asking");
});

await check("completions: logprobs, logit_bias", async () => {
  const req = { model: MODEL, prompt: "Once upon a time", max_tokens: 12, temperature: 0, logprobs: 2 };
  const a = await client.completions.create(req);
  const lp = a.choices[0].logprobs, n = lp.tokens.length;
  assert(n > 0 && lp.token_logprobs.length === n && lp.top_logprobs.length === n && lp.text_offset.length === n, JSON.stringify(lp));
  assert(lp.text_offset.every((o, i) => i === 0 ? o === 0 : o >= lp.text_offset[i - 1]), `offsets ${lp.text_offset}`);
  assert(lp.top_logprobs.every((t, i) => Object.keys(t).length === 2 && t[lp.tokens[i]] === lp.token_logprobs[i]),
         `top_logprobs ${JSON.stringify(lp.top_logprobs)}`);
  if (!lp.tokens.some((t) => t.startsWith("bytes:"))) assert(lp.tokens.join("") === a.choices[0].text, "tokens joined are not the text");
  const got = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const ch of await client.completions.create({ ...req, stream: true })) {
    const l = ch.choices[0]?.logprobs;
    if (l) for (const k of Object.keys(got)) got[k].push(...l[k]);
  }
  assert(JSON.stringify(got) === JSON.stringify(lp), "the streamed entries differ");
  // +100 on one id: greedy gives that token every time
  const b = await client.completions.create({ ...req, max_tokens: 4, logit_bias: { 1000: 100 } });
  const bt = b.choices[0].logprobs.tokens;
  assert(bt.length === 4 && bt.every((t) => t === bt[0]) && bt[0] !== lp.tokens[0], `biased tokens ${JSON.stringify(bt)}`);
  let err = null;
  try { await client.completions.create({ ...req, logit_bias: { abc: 1 } }); } catch (e) { err = e; }
  assert(err instanceof OpenAI.BadRequestError && err.code === "invalid_logit_bias" && err.param === "logit_bias",
         `bad logit_bias: ${err && err.constructor.name} ${err && err.code}`);
});

await check("completions: echo with logprobs and max_tokens 0 (a harness's log-likelihood request), a list of prompts", async () => {
  const a = await client.completions.create({ model: MODEL, prompt: ["Once upon a time", "The cat"], max_tokens: 0, echo: true,
                                              logprobs: 1, temperature: 0 });
  assert(a.choices.length === 2 && a.choices[0].text === "Once upon a time" && a.choices[1].text === "The cat" &&
         a.choices.every((c, i) => c.index === i && c.finish_reason === "length"), JSON.stringify(a));
  for (const c of a.choices) {
    const lp = c.logprobs;
    assert(lp.token_logprobs[0] === null && lp.top_logprobs[0] === null && lp.token_logprobs.slice(1).every((v) => v <= 0),
           JSON.stringify(lp));
    assert(lp.tokens.join("") === c.text && lp.text_offset[0] === 0, JSON.stringify(lp));
  }
  assert(a.usage.completion_tokens === 0 && a.usage.prompt_tokens === a.choices.reduce((n, c) => n + c.logprobs.tokens.length, 0),
         JSON.stringify(a.usage));
});

const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] },
  },
}];
await check("tools: a history with string arguments is accepted and rendered", async () => {
  const history = (args) => [
    { role: "user", content: "What is the weather in Paris?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: args } }] },
    { role: "tool", tool_call_id: "call_1", content: "sunny, 24 C" },
  ];
  const base = { model: MODEL, tools, max_tokens: 8, temperature: 0, ...NOTHINK };
  const plain = await client.chat.completions.create({ ...base, messages: history(undefined).slice(0, 1) });
  const r = await client.chat.completions.create({ ...base, messages: history(JSON.stringify({ city: "Paris", days: 2 })) });
  assert(r.choices[0].message.role === "assistant", JSON.stringify(r));
  // the call and its result are in the prompt: more tokens than the question alone
  assert(r.usage.prompt_tokens > plain.usage.prompt_tokens + 15, `prompt ${r.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
  // the same with a string that differs only in spacing renders the same prompt (it is parsed)
  const r2 = await client.chat.completions.create({ ...base, messages: history('{ "city" : "Paris" , "days" : 2 }') });
  assert(r2.usage.prompt_tokens === r.usage.prompt_tokens, `spacing changed the prompt: ${r2.usage.prompt_tokens} vs ${r.usage.prompt_tokens}`);
  const mc = r.choices[0].message;
  if (mc.tool_calls) {
    for (const tc of mc.tool_calls) {
      assert(tc.type === "function" && typeof tc.id === "string" && typeof tc.function.arguments === "string", JSON.stringify(tc));
      JSON.parse(tc.function.arguments);
    }
    assert(r.choices[0].finish_reason === "tool_calls", r.choices[0].finish_reason);
  }
});

// tools with bounded arguments, so that a random model's forced call ends
const forcedTools = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer" } }, required: ["city"] } } },
  { type: "function", function: { name: "get_time",
    parameters: { type: "object", properties: { zone: { enum: ["utc", "cet"] } }, required: ["zone"] } } },
];
await check("tool_choice: a named function, \"required\" and \"none\"; streamed calls equal whole ones", async () => {
  const base = { model: MODEL, messages: [{ role: "user", content: "What is the weather in Paris?" }], tools: forcedTools,
                 max_tokens: 400, temperature: 0, parallel_tool_calls: false, ...NOTHINK };
  const named = { ...base, tool_choice: { type: "function", function: { name: "get_time" } } };
  const c = (await client.chat.completions.create(named)).choices[0];
  assert(c.finish_reason === "tool_calls" && c.message.tool_calls?.length === 1, JSON.stringify(c));
  const tc = c.message.tool_calls[0];
  assert(tc.type === "function" && typeof tc.id === "string" && tc.function.name === "get_time", JSON.stringify(tc));
  const args = JSON.parse(tc.function.arguments);
  assert(Object.keys(args).length === 1 && ["utc", "cet"].includes(args.zone), `arguments ${tc.function.arguments}`);
  const calls = [];
  let fin = null;
  for await (const ch of await client.chat.completions.create({ ...named, stream: true })) {
    for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
      calls[d.index] ??= { name: "", arguments: "" };
      calls[d.index].name += d.function?.name ?? "";
      calls[d.index].arguments += d.function?.arguments ?? "";
    }
    fin = ch.choices[0]?.finish_reason ?? fin;
  }
  assert(fin === "tool_calls" && calls.length === 1 && calls[0].name === "get_time" && calls[0].arguments === tc.function.arguments,
         `streamed ${JSON.stringify(calls)} (${fin})`);
  const r = (await client.chat.completions.create({ ...base, tool_choice: "required" })).choices[0];
  const rt = r.message.tool_calls?.[0];
  assert(r.finish_reason === "tool_calls" && ["get_weather", "get_time"].includes(rt?.function.name), JSON.stringify(r));
  const ra = JSON.parse(rt.function.arguments);
  assert(rt.function.name === "get_time" ? ["utc", "cet"].includes(ra.zone) : typeof ra.city === "string" && [...ra.city].length <= 12,
         `arguments ${rt.function.arguments}`);
  const n = (await client.chat.completions.create({ ...base, tool_choice: "none", max_tokens: 16 })).choices[0];
  assert(!n.message.tool_calls && n.finish_reason !== "tool_calls", JSON.stringify(n));
});

await check("reasoning: thinking replies carry reasoning_content, streamed the same", async () => {
  // the bundled model's template thinks only when asked (as the small Qwen3.5 checkpoints)
  const req = { model: MODEL, messages: [{ role: "user", content: "Why is the sky blue?" }], max_tokens: 16, temperature: 0,
                chat_template_kwargs: { enable_thinking: true } };
  const a = await client.chat.completions.create(req);
  const m = a.choices[0].message;
  const reasoning = m.reasoning_content;
  assert(typeof reasoning === "string" && reasoning.length > 0, `reasoning_content ${JSON.stringify(reasoning)}`);
  let r = "", c = "";
  for await (const ch of await client.chat.completions.create({ ...req, stream: true })) {
    const d = ch.choices[0]?.delta ?? {};
    if (d.reasoning_content) r += d.reasoning_content;
    if (d.content) c += d.content;
  }
  assert(r === reasoning && c === (m.content ?? ""), `streamed reasoning '${r}' vs '${reasoning}'`);
  // without thinking there is none
  const b = await client.chat.completions.create({ ...req, ...NOTHINK });
  assert(b.choices[0].message.reasoning_content === undefined, "reasoning_content with thinking off");
});

await check("seeds: same seed same draw, other seeds differ", async () => {
  const req = (seed) => client.completions.create({ model: MODEL, prompt: "The little dog", max_tokens: 24, temperature: 1.0, seed });
  const a = (await req(42)).choices[0].text, b = (await req(42)).choices[0].text;
  assert(a === b, `seed 42 twice: '${a}' vs '${b}'`);
  const others = [(await req(43)).choices[0].text, (await req(44)).choices[0].text];
  assert(others.some((t) => t !== a), "three seeds gave one text: the seed is not used");
});

await check("aborts: a cancelled stream stops the generation", async () => {
  const before = await metric("turbospark_tokens_generated_total");
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model: MODEL, prompt: "Go", max_tokens: 3000, temperature: 0, stream: true, ignore_eos: true },
    { signal: controller.signal });
  let got = 0;
  try {
    for await (const ch of stream) {
      if (ch.choices[0]?.text) got++;
      if (got >= 3) controller.abort();
    }
  } catch (e) {
    assert(e.name === "AbortError" || e instanceof OpenAI.APIUserAbortError || /abort/i.test(String(e)), `unexpected ${e}`);
  }
  assert(got >= 3, `${got} chunks before the abort`);
  let busy = 1;
  for (let i = 0; i < 100 && busy !== 0; i++) {
    busy = await metric("turbospark_sessions_busy");
    if (busy !== 0) await new Promise((r) => setTimeout(r, 50));
  }
  assert(busy === 0, "the session still generates after the abort");
  const after = await metric("turbospark_tokens_generated_total");
  assert(after - before < 3000, `generated ${after - before} tokens: the abort did not stop it`);
  // the server goes on serving
  const r = await client.completions.create({ model: MODEL, prompt: "ok", max_tokens: 2, temperature: 0 });
  assert(r.choices[0].text !== undefined, "no reply after the abort");
});

await check("json_object and n: a finished reply parses as an object; n choices", async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: "Describe a cat as a JSON object." }], max_tokens: 160,
    temperature: 0, response_format: { type: "json_object" }, chat_template_kwargs: { enable_thinking: false }, n: 2 });
  assert(r.choices.length === 2, `${r.choices.length} choices for n = 2`);
  for (const c of r.choices) {
    if (c.finish_reason === "stop") {
      const v = JSON.parse(c.message.content);
      assert(v !== null && typeof v === "object" && !Array.isArray(v), `not an object: ${c.message.content}`);
    } else {
      assert(c.finish_reason === "length", `finish ${c.finish_reason}`);
    }
  }
  assert(r.choices[0].message.content === r.choices[1].message.content, "two greedy choices differ");
});

await check("json_schema: a finished reply follows the schema", async () => {
  const schema = { type: "object", additionalProperties: false, required: ["name", "legs"],
                   properties: { name: { type: "string", maxLength: 8 }, legs: { enum: [2, 4] } } };
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: "Describe a cat." }], max_tokens: 600, temperature: 0,
    response_format: { type: "json_schema", json_schema: { name: "cat", strict: true, schema } },
    chat_template_kwargs: { enable_thinking: false } });
  const c = r.choices[0];
  assert(c.finish_reason === "stop", `finish ${c.finish_reason}: ${c.message.content}`);
  const v = JSON.parse(c.message.content);
  assert(Object.keys(v).every((k) => k === "name" || k === "legs") && typeof v.name === "string" &&
         [...v.name].length <= 8 && (v.legs === 2 || v.legs === 4), `does not follow the schema: ${c.message.content}`);
});

await check("errors: refused requests raise the client's typed errors", async () => {
  const cases = [
    [{ model: MODEL, messages: userMsg, response_format: { type: "json_schema",
       json_schema: { name: "x", schema: { type: "string", pattern: "^a+$" } } } },
     OpenAI.BadRequestError, 400, "invalid_json_schema"],
    [{ model: MODEL, messages: userMsg, tools, response_format: { type: "json_schema", json_schema: { name: "x", schema: {} } } },
     OpenAI.BadRequestError, 400, "unsupported_response_format"],
    [{ model: MODEL, messages: userMsg, tool_choice: "required", tools: [{ type: "function", function: { name: "book",
       parameters: { type: "object", properties: { seats: { type: "integer", minimum: 1 } } } } }] },
     OpenAI.BadRequestError, 400, "unsupported_tool_schema"],
    [{ model: MODEL, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AA" } }] }] },
     OpenAI.BadRequestError, 400, "unsupported_content_part"],
    [{ model: "gpt-4o", messages: userMsg }, OpenAI.NotFoundError, 404, "model_not_found"],
  ];
  for (const [body, cls, status, code] of cases) {
    let err = null;
    try { await client.chat.completions.create(body); } catch (e) { err = e; }
    assert(err instanceof cls && err.status === status && err.code === code,
      `${JSON.stringify(body).slice(0, 80)}: ${err && err.constructor.name} ${err && err.status} ${err && err.code}`);
  }
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
