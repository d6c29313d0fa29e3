"""Copy the screenshots the browser tests took (test-artifacts/) into docs/tour/ for the README.

The tests are the only thing that draws them, so the tour shows what a user gets from this
version: run `make test PYTEST_ARGS="tests/test_report.py tests/test_notebook_browser.py
tests/test_notebook_classic.py"`
first, then `make tour`. Tall pages are cut to their top so the README stays light.
"""
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
TOUR = ROOT / "docs" / "tour"
SHOTS = {  # source under test-artifacts/ -> name in docs/tour/
    "tour/summary.png": "1-summary.png",
    "report-chromium.png": "2-report.png",
    "tour/notebook-lab-1.png": "3-notebook-slices.png",
    "tour/notebook-lab-2.png": "4-notebook-vs-baseline.png",
    "tour/notebook-classic-1.png": "5-notebook-classic.png",
}
MAX_HEIGHT = 1400


def main() -> int:
    missing = [name for name in SHOTS if not (ARTIFACTS / name).is_file()]
    if missing:
        print(f"No {', '.join(missing)} under {ARTIFACTS}: run the browser tests first (tests/test_report.py, "
              "tests/test_notebook_browser.py, tests/test_notebook_classic.py), then make tour again.",
              file=sys.stderr)
        return 2
    TOUR.mkdir(parents=True, exist_ok=True)
    for source, target in SHOTS.items():
        with Image.open(ARTIFACTS / source) as image:
            image.crop((0, 0, image.width, min(image.height, MAX_HEIGHT))).save(TOUR / target, optimize=True)
        print(TOUR / target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
