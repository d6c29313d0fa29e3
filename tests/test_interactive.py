"""The notebook's Plotly views on a small frame: what the dropdowns do, without a pipeline run.

The browser test (test_notebook_browser.py) shows them drawn in JupyterLab on a real run;
here the orders and the metric picker are checked exactly.
"""
import json

import pandas as pd
import plotly.io as pio
import pytest
from support.headless_chromium import ChromiumNotFound, chromium_page, find_chromium

from pipeline.report import interactive


def _frame() -> pd.DataFrame:
    frame = pd.DataFrame({"slice": ["label=b", "overall", "label=a"], "feature": ["label", "", "label"],
                          "example_count": [10.0, 30.0, 20.0], "accuracy": [0.5, 0.7, 0.9],
                          "loss": [1.5, 0.9, 0.3]})
    frame.attrs.update(key_metric="accuracy", higher_is_better=True)
    return frame


def test_slices_table_starts_worst_first_and_every_dropdown_entry_is_an_order():
    figure = interactive.slices_table(_frame())
    assert list(figure.data[0].cells.values[0]) == ["label=b", "overall", "label=a"]
    # restyle args: one list of columns per trace
    buttons = {b.label: [list(c) for c in b.args[0]["cells.values"][0]] for b in figure.layout.updatemenus[0].buttons}
    assert buttons["sort by loss ↓"][0] == ["label=b", "overall", "label=a"]
    assert buttons["sort by example_count ↓"][0] == ["overall", "label=a", "label=b"]
    assert buttons["sort by accuracy ↓"][3] == ["0.9000", "0.7000", "0.5000"]   # the values move with the rows
    assert figure.layout.updatemenus[0].buttons[figure.layout.updatemenus[0].active].label == "sort by accuracy ↑"


def test_figures_serialize_with_plotly_js_inlined_for_offline_html():
    html = pio.to_html(interactive.slices_table(_frame()), include_plotlyjs=True, full_html=True)
    assert "<script src=" not in html   # nothing fetched from a CDN
    assert len(html) > 1_000_000   # plotly.js itself is in the page, not fetched
    assert json.loads(pio.to_json(interactive.slices_table(_frame())))["data"][0]["type"] == "table"


def test_a_notebook_output_carries_plotly_js_only_when_asked_and_always_the_json():
    first = interactive.notebook_bundle(interactive.slices_table(_frame()), with_library=True)
    later = interactive.notebook_bundle(interactive.slices_table(_frame()), with_library=False)
    for bundle in (first, later):   # JupyterLab's renderer draws this form
        assert bundle[interactive.PLOTLY_MIMETYPE]["data"][0]["type"] == "table"
        assert "label=b" in bundle["text/html"]
    assert interactive.LIBRARY_PROMISE + " = " in first["text/html"] and len(first["text/html"]) > 1_000_000
    assert interactive.LIBRARY_PROMISE + " = " not in later["text/html"] and len(later["text/html"]) < 20_000
    assert len(first["text/html"]) < 2_200_000   # compressed: plotly.js itself is 4.6 MB


# Runs in the page: the figures drawn by plotly.js (an SVG per plot), with their cells' text.
_DRAWN = """new Promise(done => { const check = () => {
  const plots = Array.from(document.querySelectorAll('.plotly-graph-div .main-svg'))
                     .map(s => s.closest('.plotly-graph-div'));
  if (new Set(plots).size >= 2 || performance.now() > 20000) {
    done({plots: new Set(plots).size, text: plots.map(p => p.textContent).join(' ')});
  } else { setTimeout(check, 200); } }; check(); })"""


def test_the_html_form_draws_in_a_real_browser_offline_even_with_require_js_on_the_page(tmp_path):
    """What nbconvert's HTML export and the classic notebook do with the outputs: plotly.js unpacked once, two plots.

    The page defines an AMD ``define`` first, as require.js does (nbconvert's templates load it): plotly.js must
    still become the global the figures use.
    """
    amd = "<script>window.define = function () {}; window.define.amd = {};</script>"
    figures = [interactive.slices_table(_frame()), interactive.slices_table(_frame(), title="again")]
    bodies = [interactive.notebook_bundle(f, with_library=i == 0)["text/html"] for i, f in enumerate(figures)]
    page_path = tmp_path / "outputs.html"
    page_path.write_text(f"<!DOCTYPE html><html><head>{amd}</head><body>{''.join(bodies)}</body></html>")
    try:
        binary = find_chromium()
    except ChromiumNotFound as error:
        pytest.fail(f"This test needs a real browser: {error}")
    with chromium_page(tmp_path / "chromium-profile", binary) as page:
        page.open(f"file://{page_path}")
        seen = page.evaluate(_DRAWN)
        outside = [u for u in page.requested_urls() if not u.startswith(("file:", "data:", "blob:"))]
    assert seen["plots"] == 2, seen
    assert "label=b" in seen["text"] and "again" in seen["text"]
    assert not outside, outside
