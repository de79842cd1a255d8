#!/usr/bin/env bash
# Fetches the npm package chinese-poetry 2.0.1 (MIT) into data/ at the repository root
# (git-ignored) and unpacks it. npm verifies the tarball against the registry's integrity hash.
#
# Afterwards:
#   data/chinese-poetry-2.0.1.tgz          the tarball
#   data/chinese-poetry-2.0.1/             the unpacked package (dist/, LICENSE, README.md)
#   data/chinese-poetry/poems/             links to the poem files only:
#       tang/poet.tang.*.json   Tang shi (quantangshi)
#       song/poet.song.*.json   Song shi (quantangshi)
#       ci/ci.song.*.json       Song ci  (songci)
#       variants/tangshisanbaishou-gaps.json
#                               the couplets of the Three Hundred Tang Poems in the forms the
#                               anthology gives and quantangshi lacks (床前明月光...), each once
#                               (scripts/anthology_gaps.py wrote it; committed in scripts/corpus-gaps/)
# Point the corpus reader at data/chinese-poetry/poems (or one of its folders): the package's
# dist/ folders also hold author lists and an error/ folder, which are not poems.
set -euo pipefail

version=2.0.1
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="$root/data"
mkdir -p "$data"
cd "$data"

tarball="chinese-poetry-$version.tgz"
if [[ ! -f "$tarball" ]]; then
    npm pack "chinese-poetry@$version" --silent >/dev/null
fi

package="chinese-poetry-$version"
rm -rf "$package"
mkdir "$package"
tar -xzf "$tarball" -C "$package" --strip-components=1

poems="$data/chinese-poetry/poems"
rm -rf "$poems"
mkdir -p "$poems/tang" "$poems/song" "$poems/ci" "$poems/variants"
dist="$data/$package/dist"
ln -s "$dist"/quantangshi/poet.tang.*.json "$poems/tang/"
ln -s "$dist"/quantangshi/poet.song.*.json "$poems/song/"
ln -s "$dist"/songci/ci.song.[0-9]*.json "$poems/ci/"
ln -s "$root"/scripts/corpus-gaps/tangshisanbaishou-gaps.json "$poems/variants/"

echo "chinese-poetry $version unpacked in $data/$package"
for part in tang song ci variants; do
    echo "  $poems/$part: $(find "$poems/$part" -name '*.json' | wc -l) files"
done
