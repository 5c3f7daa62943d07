// openai_client.mjs: specula serve driven by the official `openai` npm client: chat,
// streaming, completions, logprobs, seeds, and determinism under load (8 concurrent
// greedy requests return the text and logprobs of the same requests sent one at a time;
// so do n-gram and draft-model speculating servers, whose greedy output is also the plain
// server's, and seeded sampling).
// usage: node openai_client.mjs SPECULA MODEL_DIR DEPS_DIR
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import path from 'node:path';

const [specula, modelDir, depsDir] = process.argv.slice(2);
const require = createRequire(path.resolve(depsDir, 'node') + '/');
const OpenAI = require('openai');

let fails = 0;
async function check(name, fn) {
  try { await fn(); console.log(`ok   ${name}`); }
  catch (e) { fails++; console.log(`FAIL ${name}\n  ${e && e.stack ? e.stack.split('\n').slice(0, 4).join('\n  ') : e}`); }
}

function startServer(args) {
  return new Promise((resolve, reject) => {
    const p = spawn(specula, ['serve', '-m', modelDir, '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const timer = setTimeout(() => reject(new Error('server did not start: ' + err)), 60000);
    p.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/^listening on (http:\/\/\S+)/m);
      if (m) { clearTimeout(timer); resolve({ proc: p, url: m[1] }); }
    });
    p.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}: ${err}`)); });
  });
}
function stopServer(s) {
  return new Promise((resolve) => { s.proc.removeAllListeners('exit'); s.proc.on('exit', (code) => resolve(code)); s.proc.kill('SIGTERM'); });
}

const prompts = [
  'def read_config(path):', 'import os\nimport sys\n', 'class Queue:', 'for i in range(10):',
  'def parse_args(argv):', '# Copyright', 'return self._data', 'try:\n    import json',
];
const chatReq = (i, extra = {}) => ({
  model: 'default', messages: [{ role: 'user', content: prompts[i] }], max_tokens: 24,
  temperature: 0, logprobs: true, top_logprobs: 3, ...extra,
});
const summary = (r) => JSON.stringify({
  text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage,
  lp: r.choices[0].logprobs.content.map((t) => [t.token, t.logprob, t.top_logprobs.map((x) => [x.token, x.logprob])]),
});

const main = await startServer(['--parallel', '8', '--queue', '8']);
const client = new OpenAI({ baseURL: main.url + '/v1', apiKey: 'none', maxRetries: 0 });

await check('models.list', async () => {
  const m = await client.models.list();
  assert.equal(m.data[0].id, 'default');
});

let plain;
await check('chat.completions.create', async () => {
  const r = await client.chat.completions.create(chatReq(0));
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  plain = r;
});

await check('chat logprobs: greedy token is the top alternative', async () => {
  for (const t of plain.choices[0].logprobs.content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
  }
});

await check('chat streaming: same text as non-streaming, role first, usage last', async () => {
  const stream = await client.chat.completions.create({ ...chatReq(0), stream: true, stream_options: { include_usage: true } });
  let text = '', role = null, finish = null, usage = null, n = 0, lps = [];
  for await (const chunk of stream) {
    n++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.role) role = c.delta.role;
    if (c.delta.content) text += c.delta.content;
    if (c.logprobs) lps.push(...c.logprobs.content);
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.deepEqual(usage, plain.usage);
  assert.deepEqual(lps.map((t) => t.logprob), plain.choices[0].logprobs.content.map((t) => t.logprob));
  assert.ok(n > 3);
});

await check('completions.create with logprobs', async () => {
  const r = await client.completions.create({ model: 'default', prompt: 'def read_config(path):', max_tokens: 10, logprobs: 2, temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 10);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  assert.equal(lp.text_offset[0], 0);
  assert.equal(Object.keys(lp.top_logprobs[0]).length, 2);
  assert.equal(r.choices[0].finish_reason, 'length');
});

await check('completions streaming joins to the full text', async () => {
  const full = await client.completions.create({ model: 'default', prompt: 'class Queue:', max_tokens: 16, temperature: 0 });
  const s = await client.completions.create({ model: 'default', prompt: 'class Queue:', max_tokens: 16, temperature: 0, stream: true });
  let t = '';
  for await (const c of s) if (c.choices[0]) t += c.choices[0].text;
  assert.equal(t, full.choices[0].text);
});

await check('stop sequences (list) are not returned', async () => {
  const full = await client.completions.create({ model: 'default', prompt: 'def read_config(path):', max_tokens: 30, temperature: 0, ignore_eos: true });
  const words = full.choices[0].text.split(/\s+/).filter((w) => w.length > 2);
  const stop = words[2];
  const r = await client.completions.create({ model: 'default', prompt: 'def read_config(path):', max_tokens: 30, temperature: 0, ignore_eos: true, stop: ['@@@', stop] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(!r.choices[0].text.includes(stop));
  assert.ok(full.choices[0].text.startsWith(r.choices[0].text + stop));
});

await check('bad request surfaces as openai.BadRequestError (400)', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'default', messages: [], max_tokens: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.error && e.error.type === 'invalid_request_error');
});

// determinism under load: one at a time, then 8 at once
const seqGreedy = [];
for (let i = 0; i < 8; i++) seqGreedy.push(summary(await client.chat.completions.create(chatReq(i))));
const sampled = (i) => chatReq(i, { temperature: 0.9, top_p: 0.95, seed: 1000 + i });
const seqSampled = [];
for (let i = 0; i < 8; i++) seqSampled.push(summary(await client.chat.completions.create(sampled(i))));

await check('determinism: 8 concurrent greedy requests == one at a time (text and logprobs)', async () => {
  const conc = await Promise.all(prompts.map((_, i) => client.chat.completions.create(chatReq(i))));
  conc.forEach((r, i) => assert.equal(summary(r), seqGreedy[i], `request ${i}`));
});
await check('determinism: 8 concurrent seeded sampled requests == one at a time', async () => {
  const conc = await Promise.all(prompts.map((_, i) => client.chat.completions.create(sampled(i))));
  conc.forEach((r, i) => assert.equal(summary(r), seqSampled[i], `request ${i}`));
});
await check('determinism: concurrent streams mixed with non-streamed requests', async () => {
  const jobs = prompts.map(async (_, i) => {
    if (i % 2) return summary(await client.chat.completions.create(chatReq(i)));
    const s = await client.chat.completions.create({ ...chatReq(i), stream: true, stream_options: { include_usage: true } });
    let text = '', finish = null, usage = null, lps = [];
    for await (const c of s) {
      if (c.usage) usage = c.usage;
      if (!c.choices[0]) continue;
      text += c.choices[0].delta.content || '';
      if (c.choices[0].logprobs) lps.push(...c.choices[0].logprobs.content);
      if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    }
    return summary({ usage, choices: [{ message: { content: text }, finish_reason: finish, logprobs: { content: lps } }] });
  });
  (await Promise.all(jobs)).forEach((s, i) => assert.equal(s, seqGreedy[i], `request ${i}`));
});
// repetitive prompts give the n-gram drafter something to find
const seqGreedy48 = [];
for (let i = 0; i < 8; i++) seqGreedy48.push(summary(await client.chat.completions.create(chatReq(i, { max_tokens: 48 }))));
await check('SIGTERM: exit 0', async () => assert.equal(await stopServer(main), 0));

// n-gram speculation inside the batch: greedy output identical to the plain server
const spec = await startServer(['--parallel', '8', '--draft', 'ngram', '--draft-k', '4']);
const sclient = new OpenAI({ baseURL: spec.url + '/v1', apiKey: 'none', maxRetries: 0 });
await check('n-gram speculation: 8 concurrent greedy requests == plain server, one at a time', async () => {
  const conc = await Promise.all(prompts.map((_, i) => sclient.chat.completions.create(chatReq(i, { max_tokens: 48 }))));
  conc.forEach((r, i) => assert.equal(summary(r), seqGreedy48[i], `request ${i}`));
  const m = await (await fetch(spec.url + '/metrics')).text();
  const drafted = Number(m.match(/^specula_spec_decode_num_draft_tokens (\d+)/m)[1]);
  const accepted = Number(m.match(/^specula_spec_decode_num_accepted_tokens (\d+)/m)[1]);
  console.log(`  n-gram drafts: ${drafted} proposed, ${accepted} accepted`);
  assert.ok(drafted > 0);
});
await check('n-gram speculation, sampled: 8 concurrent seeded requests == one at a time', async () => {
  const req = (i) => sampled(i);
  const seq = [];
  for (let i = 0; i < 8; i++) seq.push(summary(await sclient.chat.completions.create(req(i))));
  const conc = await Promise.all(prompts.map((_, i) => sclient.chat.completions.create(req(i))));
  conc.forEach((r, i) => assert.equal(summary(r), seq[i], `request ${i}`));
});
await check('SIGTERM (speculating server): exit 0', async () => assert.equal(await stopServer(spec), 0));

// a draft model inside the batch (models/default-draft, the bundled model's distilled
// draft): greedy output identical to the plain server's, sampled output reproducible
const draftDir = path.join(path.dirname(modelDir), 'default-draft');
const dspec = await startServer(['--parallel', '8', '--draft', draftDir, '--draft-k', '4']);
const dclient = new OpenAI({ baseURL: dspec.url + '/v1', apiKey: 'none', maxRetries: 0 });
await check('draft model: 8 concurrent greedy requests == plain server, one at a time', async () => {
  const conc = await Promise.all(prompts.map((_, i) => dclient.chat.completions.create(chatReq(i, { max_tokens: 48 }))));
  conc.forEach((r, i) => assert.equal(summary(r), seqGreedy48[i], `request ${i}`));
  const m = await (await fetch(dspec.url + '/metrics')).text();
  const drafted = Number(m.match(/^specula_spec_decode_num_draft_tokens (\d+)/m)[1]);
  const accepted = Number(m.match(/^specula_spec_decode_num_accepted_tokens (\d+)/m)[1]);
  console.log(`  draft model: ${drafted} proposed, ${accepted} accepted`);
  assert.ok(drafted > 0 && accepted > 0 && accepted < drafted);
  assert.match(m, /^specula_spec_decode_acceptance_per_pos\{position="3"\} /m);
});
await check('draft model, sampled: 8 concurrent seeded requests == one at a time', async () => {
  const seq = [];
  for (let i = 0; i < 8; i++) seq.push(summary(await dclient.chat.completions.create(sampled(i))));
  const conc = await Promise.all(prompts.map((_, i) => dclient.chat.completions.create(sampled(i))));
  conc.forEach((r, i) => assert.equal(summary(r), seq[i], `request ${i}`));
});
await check('SIGTERM (draft-model server): exit 0', async () => assert.equal(await stopServer(dspec), 0));

console.log(`openai client: ${fails} failure(s)`);
process.exit(fails ? 1 : 0);
