"""Makes the small font the `roformer` CLI embeds to label PNG plots.

plotters renders PNG text with ab_glyph from a font we register at run time, so the binary needs
no system fonts (no fontconfig/freetype). This script cuts DejaVu Sans (Bitstream Vera license,
see crates/roformer-runner/assets/DejaVuSans-LICENSE.txt) down to printable ASCII plus the few math
symbols our axis labels use, which keeps the committed file small.

Usage (needs `pip install fonttools`; Debian ships the source font in fonts-dejavu-core):
    python scripts/subset_font.py [/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf]
"""

import sys
from pathlib import Path

from fontTools import subset

SOURCE = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
TARGET = Path(__file__).resolve().parent.parent / "crates/roformer-runner/assets/DejaVuSans-subset.ttf"
# Printable ASCII, then: capital sigma, theta, phi, middle dot, times, minus, less-or-equal,
# angle brackets, approximately-equal.
EXTRA = "\u03a3\u03b8\u03c6\u00b7\u00d7\u2212\u2264\u27e8\u27e9\u2248"


def main() -> None:
    source = sys.argv[1] if len(sys.argv) > 1 else SOURCE
    text = "".join(chr(c) for c in range(0x20, 0x7F)) + EXTRA
    options = subset.Options()
    options.layout_features = ["kern"]
    options.hinting = False
    options.name_IDs = ["*"]
    font = subset.load_font(source, options)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=text)
    subsetter.subset(font)
    subset.save_font(font, str(TARGET), options)
    print(f"wrote {TARGET} ({TARGET.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
