#!/usr/bin/env bash
# Installs the Debian packages turbospark builds against, if any is missing,
# and the openai npm client of the black-box server test (tests/openai/).
# Idempotent: prints nothing and changes nothing when all are present.
set -euo pipefail
need=()
have_header() { [ -e "/usr/include/$1" ]; }
have_header cjson/cJSON.h       || need+=(libcjson-dev)
have_header pcre2.h             || need+=(libpcre2-dev)
have_header utf8proc.h          || need+=(libutf8proc-dev)
have_header microhttpd.h        || need+=(libmicrohttpd-dev)
have_header readline/readline.h || need+=(libreadline-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v xz >/dev/null        || need+=(xz-utils)
# `scripts/deps.sh fuzz` (make fuzz): clang and its libFuzzer / sanitizer runtime as well
if [ "${1:-}" = fuzz ]; then
    command -v clang >/dev/null || need+=(clang)
    [ -n "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null | grep /)" ] &&
        [ -e "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a)" ] || need+=(libclang-rt-14-dev)
fi
# The official openai npm client for the black-box server test
# (tests/openai/, pinned by its package.json and package-lock.json), installed
# into tests/openai/node_modules. Idempotent and offline-tolerant: without npm
# or a registry it says so once and the test skips, saying why.
openai_client() {
    local d
    d="$(cd "$(dirname "$0")/.." && pwd)/tests/openai"
    [ -e "$d/node_modules/openai/package.json" ] && return 0
    if ! command -v npm >/dev/null; then
        echo "turbospark: npm not found: the openai client test (server.openai_npm_client) will skip" >&2
        return 0
    fi
    (cd "$d" && timeout 180 npm install --no-audit --no-fund --silent >/dev/null 2>&1) ||
        echo "turbospark: npm could not install the openai client: server.openai_npm_client will skip" >&2
}
openai_client
[ ${#need[@]} -eq 0 ] && exit 0
echo "turbospark: installing missing packages: ${need[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >&2
