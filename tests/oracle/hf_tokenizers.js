// Oracle: Hugging Face tokenizers (the Rust core, through its Node binding tokenizers@0.23.2).
// usage: node hf_tokenizers.js TOKENIZER_JSON REQUEST_JSON > RESPONSE_JSON
//   REQUEST_JSON: {"texts": [str...], "decode": [[id...]...], "decode_encoded": bool}
//   response: {"encode": [{"ids": [...], "ids_add_special": [...]}...],
//              "decode": [str...],   (decode keeps special tokens: skip_special_tokens=false)
//              "decode_encoded": [decode(ids_add_special) for each text] when asked}
const path = require('path');
const fs = require('fs');
const { Tokenizer } = require(path.join(__dirname, '..', '.deps', 'node', 'node_modules', 'tokenizers'));
(async () => {
  const [tjson, reqPath] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tjson);
  const req = JSON.parse(fs.readFileSync(reqPath, 'utf8'));
  const out = { encode: [], decode: [] };
  out.decode_encoded = [];
  for (const t of req.texts || []) {
    const a = await tok.encode(t, null, { addSpecialTokens: false });
    const b = await tok.encode(t, null, { addSpecialTokens: true });
    const ids = Array.from(a.getIds()), ids2 = Array.from(b.getIds());
    out.encode.push({ ids: ids, ids_add_special: ids2 });
    if (req.decode_encoded) out.decode_encoded.push(await tok.decode(ids2, false));
  }
  for (const ids of req.decode || []) {
    out.decode.push(await tok.decode(ids, false));
  }
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { console.error(String(e)); process.exit(1); });
