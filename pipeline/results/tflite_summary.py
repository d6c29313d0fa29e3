"""The run summary's ``TFLite:`` line, read from the pushed version's push_info.json.

The Pusher records each TFLite model's size, agreement with the SavedModel and accuracy, or
why it was not written (components/tflite_export.py); this only words that record.
"""
from __future__ import annotations

from typing import Any

from stackenv.user_files import UserFileError

from artifacts.serving_dir import read_push_info


def size_text(size: float) -> str:
    """1536 -> '1.5 KB'; decimal units, as file managers show them."""
    for unit in ("B", "KB", "MB"):
        if size < 1000 or unit == "MB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return ""


def _variant(name: str, entry: dict[str, Any], saved_model: dict[str, Any]) -> str:
    if not entry.get("written"):
        return f"{name} NOT written ({entry.get('why', 'no reason recorded')})"
    text = f"{name} {size_text(entry['bytes'])}, agrees {entry['agreement']:.1%}"
    if "accuracy" in saved_model:
        text += f", accuracy {entry['accuracy']:.4f} ({entry['accuracy'] - saved_model['accuracy']:+.4f})"
    return text


def line(record: dict[str, Any] | None) -> str | None:
    """``TFLite: ...`` for a push record's ``tflite`` entry; None for versions pushed before it existed."""
    if not record:
        return None
    if "saved_model" not in record:
        return f"TFLite: none ({record.get('why', 'no reason recorded')})"
    saved_model = record["saved_model"]
    variants = [_variant(name, entry, saved_model) for name, entry in record.items()
                if isinstance(entry, dict) and name != "saved_model"]
    return (f"TFLite (vs the SavedModel, {size_text(saved_model['bytes'])}, on {record['eval_examples']} eval "
            f"examples): " + "; ".join(variants))


def line_for_version(version_dir: str | None) -> str | None:
    if not version_dir:
        return None
    try:
        return line(read_push_info(version_dir).get("tflite"))
    except UserFileError as error:
        return f"TFLite: unknown ({error.paragraph})"
