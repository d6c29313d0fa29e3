"""Real image folders for the benchmarks, built from Debian packages that were not made for ML.

No downloads: everything comes from files installed by ordinary desktop packages.

- ``glyphs``: characters that are easy to confuse (0/O/Q/D, 1/l/I, 5/S, 8/B, 2/Z, ...),
  rendered with Pillow from every TrueType font of the font packages below, a few
  variants each (size, offset, slight rotation), grayscale black on white, one folder per
  character. Classes are balanced; some pairs are genuinely ambiguous in some fonts
  (``l`` vs ``I`` in a sans font), so 100% is not reachable.
  Packages: fonts-dejavu-core, fonts-dejavu-extra, fonts-liberation, fonts-freefont-ttf.
- ``icons``: the GNOME Adwaita icon theme's 48x48 PNGs (adwaita-icon-theme), one folder per
  theme category (actions, devices, emotes, mimetypes, places, status): RGBA with alpha,
  26 to 233 images per class, the project's imbalanced real set.

Deterministic: the same packages give byte-identical folders (sorted inputs, seeded
variants, PNG without timestamps). ``sets.json`` in the output folder records what was
found (fonts, icon counts), so a benchmark result names the data it measured.

    python benchmarks/image_sets.py OUT_DIR [--sets glyphs,icons] [--variants 2]
    sudo apt-get install fonts-liberation fonts-freefont-ttf   # more fonts (optional)
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation",
             "/usr/share/fonts/truetype/freefont")
#: Folder name -> character. Names, not the characters, so case-insensitive file systems work.
CHARACTERS: dict[str, str] = {
    "digit_0": "0", "digit_1": "1", "digit_2": "2", "digit_5": "5", "digit_8": "8",
    "upper_B": "B", "upper_D": "D", "upper_I": "I", "upper_O": "O", "upper_Q": "Q",
    "upper_S": "S", "upper_Z": "Z", "lower_a": "a", "lower_e": "e", "lower_l": "l",
    "lower_o": "o",
}
GLYPH_SIZE = 24
ICON_THEME = "/usr/share/icons/Adwaita"
ICON_SIZE = "48x48"
ICON_CATEGORIES = ("actions", "devices", "emotes", "mimetypes", "places", "status")
SETS = ("glyphs", "icons")


class MissingPackage(RuntimeError):
    """A source package is not installed; the message says which and how to install it."""


def find_fonts(font_dirs: Sequence[str] = FONT_DIRS) -> list[Path]:
    """Every text font (.ttf) in ``font_dirs``, sorted; math-only fonts are skipped."""
    fonts = sorted(p for d in font_dirs if Path(d).is_dir() for p in Path(d).glob("*.ttf")
                   if "Math" not in p.name)
    if not fonts:
        raise MissingPackage(
            f"No TrueType fonts found in {', '.join(font_dirs)}: the glyphs set renders "
            "characters from installed font packages. Install them with "
            "`sudo apt-get install fonts-dejavu-core fonts-liberation fonts-freefont-ttf`, "
            "or pass --font-dir.")
    return fonts


def render_glyph(font: ImageFont.FreeTypeFont, char: str, rng: np.random.RandomState,
                 size: int = GLYPH_SIZE) -> Image.Image:
    """One character, black on white, centred with a random offset and slight rotation."""
    canvas = Image.new("L", (2 * size, 2 * size), 255)
    draw = ImageDraw.Draw(canvas)
    left, top, right, bottom = draw.textbbox((0, 0), char, font=font)
    x = size - (left + right) / 2 + rng.uniform(-size / 10, size / 10)
    y = size - (top + bottom) / 2 + rng.uniform(-size / 10, size / 10)
    draw.text((x, y), char, fill=0, font=font)
    canvas = canvas.rotate(rng.uniform(-8, 8), resample=Image.BILINEAR, fillcolor=255)
    return canvas.crop((size // 2, size // 2, size // 2 + size, size // 2 + size))


def build_glyphs(out: Path, fonts: Sequence[Path | ImageFont.FreeTypeFont],
                 characters: dict[str, str] = CHARACTERS, variants: int = 2,
                 size: int = GLYPH_SIZE, seed: int = 0) -> dict[str, int]:
    """``out/<character name>/<font>_<variant>.png``; returns images per class.

    ``fonts`` are font files or loaded FreeType fonts (tests pass Pillow's built-in
    ``ImageFont.load_default(size)``, so they need no font package).
    """
    counts: dict[str, int] = {}
    for name, char in sorted(characters.items()):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        for font_index, font in enumerate(fonts):
            label = Path(font).stem if isinstance(font, (str, Path)) else f"builtin{font_index}"
            for variant in range(variants):
                rng = np.random.RandomState(zlib.crc32(f"{seed}/{name}/{label}/{variant}".encode()))
                point_size = int(round(size * rng.uniform(0.55, 0.85)))
                face = (ImageFont.truetype(str(font), point_size) if isinstance(font, (str, Path))
                        else font)
                render_glyph(face, char, rng, size).save(folder / f"{label}_{variant}.png")
        counts[name] = len(fonts) * variants
    return counts


def build_icons(out: Path, theme: str = ICON_THEME, icon_size: str = ICON_SIZE,
                categories: Sequence[str] = ICON_CATEGORIES) -> dict[str, int]:
    """Copy the theme's PNGs as ``out/<category>/<icon>.png``; returns images per class."""
    base = Path(theme) / icon_size
    if not base.is_dir():
        raise MissingPackage(
            f"No icon theme at {base}: the icons set copies the GNOME Adwaita theme's "
            f"{icon_size} PNGs. Install it with `sudo apt-get install adwaita-icon-theme`, "
            "or pass --icon-theme.")
    counts: dict[str, int] = {}
    for category in categories:
        files = sorted((base / category).glob("*.png"))
        if not files:
            continue
        (out / category).mkdir(parents=True, exist_ok=True)
        for path in files:
            shutil.copyfile(path, out / category / path.name)
        counts[category] = len(files)
    return counts


def build(out_dir: str | Path, sets: Sequence[str] = SETS, variants: int = 2,
          font_dirs: Sequence[str] = FONT_DIRS, icon_theme: str = ICON_THEME) -> dict[str, dict]:
    """Build each set into ``out_dir/<set>/`` (replacing it) and write ``sets.json``."""
    out = Path(out_dir)
    info: dict[str, dict] = {}
    for name in sets:
        target = out / name
        shutil.rmtree(target, ignore_errors=True)
        if name == "glyphs":
            fonts = find_fonts(font_dirs)
            counts = build_glyphs(target, fonts, variants=variants)
            info[name] = {"classes": counts, "fonts": [f.name for f in fonts], "variants": variants,
                          "image": f"{GLYPH_SIZE}x{GLYPH_SIZE} L"}
        elif name == "icons":
            info[name] = {"classes": build_icons(target, icon_theme), "theme": icon_theme,
                          "image": f"{ICON_SIZE} RGBA"}
        else:
            raise ValueError(f"Unknown image set {name!r}; known: {', '.join(SETS)}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "sets.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--variants", type=int, default=2, help="renderings per font and character")
    parser.add_argument("--font-dir", action="append", default=None)
    parser.add_argument("--icon-theme", default=ICON_THEME)
    args = parser.parse_args(argv)
    try:
        info = build(args.out_dir, [s for s in args.sets.split(",") if s], args.variants,
                     args.font_dir or FONT_DIRS, args.icon_theme)
    except MissingPackage as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, details in info.items():
        counts = details["classes"]
        print(f"{name}: {sum(counts.values())} images, {len(counts)} classes "
              f"({min(counts.values())}-{max(counts.values())} per class) in {Path(args.out_dir) / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
