#!/usr/bin/env bash
# Installs what the browser test of the `roformer serve` page needs (crates/roformer-cli/tests/cli/page.rs,
# scripts/test_page.mjs), each only when it is missing:
# - Debian's chromium and chromium-driver, Node.js and npm, and a CJK font (the page shows Chinese;
#   without one the screenshot shows empty boxes), by apt-get;
# - playwright-core, pinned in scripts/page-test/package-lock.json, by `npm ci` (playwright-core never
#   downloads a browser: the test drives /usr/bin/chromium).
# Idempotent; .ci/run calls it. Runs as root, or through sudo when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
fc-list :lang=zh 2>/dev/null | grep -q . || missing+=(fonts-wqy-microhei)
if ((${#missing[@]})); then
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
    echo "installing ${missing[*]}"
    "${sudo[@]}" apt-get update
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
    echo "warning: Node.js $(node --version) is older than the 20 that playwright-core 1.65 asks for" >&2
fi

cd scripts/page-test
# `npm ci` installs exactly the lock file; skipped when that version is already there.
want=$(node -p 'require("./package-lock.json").packages["node_modules/playwright-core"].version')
have=$(node -p 'try { require("./node_modules/playwright-core/package.json").version } catch { "" }')
if [ "$want" != "$have" ]; then
    npm ci --no-audit --no-fund
fi
echo "browser test dependencies ready: $(chromium --version 2>/dev/null), node $(node --version), playwright-core $want"
