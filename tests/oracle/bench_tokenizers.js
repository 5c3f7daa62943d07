// Speed of Hugging Face tokenizers (npm tokenizers@0.23.2) on a text file, for
// `specula bench-tokenizer --oracle`: the file is split at newlines into documents and
// each document is encoded by one encode() call, as specula's benchmark does.
// usage: node bench_tokenizers.js TOKENIZER_JSON TEXT_FILE RUNS  -> prints one JSON object
const path = require('path');
const fs = require('fs');
const { Tokenizer } = require(path.join(__dirname, '..', '.deps', 'node', 'node_modules', 'tokenizers'));
(async () => {
  const [tj, file, runsArg] = process.argv.slice(2);
  const runs = parseInt(runsArg || '3', 10);
  const t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tj);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const buf = fs.readFileSync(file);
  const docs = buf.toString('utf8').split('\n');
  await tok.encode('warm up', null, { addSpecialTokens: false });
  const times = [];
  let nIds = 0;
  for (let r = 0; r < runs; r++) {
    const a = process.hrtime.bigint();
    let n = 0;
    for (const d of docs) n += (await tok.encode(d, null, { addSpecialTokens: false })).getIds().length;
    times.push(Number(process.hrtime.bigint() - a) / 1e6);
    nIds = n;
  }
  times.sort((x, y) => x - y);
  const med = times[Math.floor(times.length / 2)];
  process.stdout.write(JSON.stringify({ load_ms: loadMs, encode_ms: med, mb_s: buf.length / 1e6 / (med / 1e3), ids: nIds }));
})().catch((e) => { console.error(String(e)); process.exit(1); });
