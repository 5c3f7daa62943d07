// serve_load.mjs: load generator for `specula serve` (no dependencies; Node 18+ fetch).
// C concurrent clients each send streamed /v1/completions requests back to back (a
// random token-id prompt, max_tokens M, ignore_eos) and time them: aggregate decode
// tokens/s over the run, time to first token, inter-token latency (p50 / p99).
// usage: node serve_load.mjs URL --concurrency C --requests R --prompt-len P --max-tokens M [--seconds S] [--json]
const args = process.argv.slice(2);
const url = args[0];
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? Number(args[i + 1]) : def; };
const C = opt('--concurrency', 1), R = opt('--requests', 2), P = opt('--prompt-len', 32);
const M = opt('--max-tokens', 64), S = opt('--seconds', 0), V = opt('--vocab', 32000);
const json = args.includes('--json');

let seed = 12345;
const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const ttft = [], itl = [];
let tokens = 0, failures = 0, requests = 0;

async function one(clientId) {
  const prompt = Array.from({ length: P }, () => 1 + Math.floor(rand() * (V - 1)));
  const t0 = performance.now();
  const res = await fetch(url + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: M, ignore_eos: true, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  if (res.status !== 200) { failures++; await res.text(); return; }
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '', last = null, first = true, n = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k); buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) { n = j.usage.completion_tokens; continue; }
      if (!j.choices[0] || !j.choices[0].text) continue;
      const now = performance.now();
      if (first) { ttft.push(now - t0); first = false; } else itl.push(now - last);
      last = now;
    }
  }
  tokens += n;
  requests++;
}

async function client(id, deadline) {
  for (let r = 0; S > 0 ? performance.now() < deadline : r < R; r++) {
    try { await one(id); } catch (e) { failures++; }
  }
}

const pct = (a, p) => { if (!a.length) return 0; const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))]; };
const t0 = performance.now();
await Promise.all(Array.from({ length: C }, (_, i) => client(i, t0 + S * 1000)));
const secs = (performance.now() - t0) / 1000;
const out = {
  concurrency: C, requests, failures, tokens, seconds: +secs.toFixed(2), tok_s: +(tokens / secs).toFixed(1),
  ttft_ms_p50: +pct(ttft, 50).toFixed(1), ttft_ms_p99: +pct(ttft, 99).toFixed(1),
  itl_ms_p50: +pct(itl, 50).toFixed(1), itl_ms_p99: +pct(itl, 99).toFixed(1),
};
console.log(json ? JSON.stringify(out) : `${C} streams: ${out.tok_s} tok/s, TTFT p50 ${out.ttft_ms_p50} ms p99 ${out.ttft_ms_p99} ms, ITL p50 ${out.itl_ms_p50} ms p99 ${out.itl_ms_p99} ms, ${requests} requests, ${failures} failed`);
