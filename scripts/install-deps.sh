#!/usr/bin/env bash
# Installs what specula needs to build and test on Debian 12: a C toolchain, CMake,
# cJSON, PCRE2, utf8proc, cmocka, libmicrohttpd (the server), curl (its tests), Python 3
# with Jinja2 (template goldens) and Node.js with npm (the Hugging Face tokenizers oracle,
# the openai client). Idempotent; uses sudo when not root.
set -euo pipefail
PKGS="build-essential cmake pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libcmocka-dev
      libmicrohttpd-dev curl
      python3 python3-jinja2 nodejs npm ca-certificates"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# a node/npm already on PATH (e.g. from NodeSource) serves as well as Debian's
if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=$(echo "$missing" | tr ' ' '\n' | grep -v -x -e nodejs -e npm | tr '\n' ' ')
fi
if [ -n "${missing// /}" ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
echo "specula: dependencies installed"
