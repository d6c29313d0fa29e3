"""benchmarks/image_sets.py: deterministic real-data folders (tiny versions, no font package needed)."""
import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import image_sets  # noqa: E402


def _digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.png")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def test_glyphs_are_deterministic_and_grouped_by_character(tmp_path):
    fonts = [ImageFont.load_default(size=14), ImageFont.load_default(size=18)]
    chars = {"digit_0": "0", "upper_O": "O", "lower_l": "l"}
    counts = image_sets.build_glyphs(tmp_path / "a", fonts, chars, variants=2)
    image_sets.build_glyphs(tmp_path / "b", fonts, chars, variants=2)
    assert counts == {"digit_0": 4, "upper_O": 4, "lower_l": 4}
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    image = np.asarray(Image.open(tmp_path / "a" / "upper_O" / "builtin0_0.png"))
    assert image.shape == (image_sets.GLYPH_SIZE, image_sets.GLYPH_SIZE)
    assert image.min() < 128 < image.max()  # ink on paper, not a blank canvas


def test_icons_keep_alpha_and_imbalance(tmp_path):
    theme = tmp_path / "theme"
    for category, count in (("actions", 3), ("places", 1)):
        folder = theme / "48x48" / category
        folder.mkdir(parents=True)
        for i in range(count):
            Image.new("RGBA", (48, 48), (10 * i, 0, 0, 0)).save(folder / f"icon{i}.png")
    counts = image_sets.build_icons(tmp_path / "out", str(theme), "48x48", ("actions", "places", "absent"))
    assert counts == {"actions": 3, "places": 1}
    assert Image.open(tmp_path / "out" / "places" / "icon0.png").mode == "RGBA"


def test_missing_package_is_one_clear_message(tmp_path, capsys):
    assert image_sets.main([str(tmp_path), "--sets", "glyphs", "--font-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "apt-get install fonts-dejavu-core" in err and "\n" not in err.strip()
    with pytest.raises(image_sets.MissingPackage, match="adwaita-icon-theme"):
        image_sets.build_icons(tmp_path, str(tmp_path / "no-theme"))
