"""The notebook's Plotly views on a small frame: what the dropdowns do, without a pipeline run.

The browser test (test_notebook_browser.py) shows them drawn in JupyterLab on a real run;
here the orders and the metric picker are checked exactly.
"""
import json

import pandas as pd
import plotly.io as pio

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
