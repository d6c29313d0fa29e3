#!/usr/bin/env bash
# Create the project virtualenv with Python 3.10 and install the pinned stack.
# Python 3.10 is searched as: $PYTHON, python3.10 on PATH, ~/.pyenv/versions/3.10*/bin/python3.10.
set -euo pipefail
venv="${1:-.venv}"
cd "$(dirname "$0")/.."

is_py310() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; }

find_python() {
  if [ -n "${PYTHON:-}" ]; then
    if is_py310 "$PYTHON"; then echo "$PYTHON"; return 0; fi
    echo "error: PYTHON=$PYTHON is not a working Python 3.10 interpreter." >&2
    return 1
  fi
  local candidate
  for candidate in "$(command -v python3.10 || true)" "$HOME"/.pyenv/versions/3.10*/bin/python3.10; do
    if is_py310 "$candidate"; then echo "$candidate"; return 0; fi
  done
  cat >&2 <<'MSG'
error: Python 3.10 not found.
  TFX 1.16 (the newest TFX whose wheels run on glibc < 2.38) supports Python 3.9-3.10 only.
  Looked for: $PYTHON, python3.10 on PATH, ~/.pyenv/versions/3.10*/bin/python3.10.
  Fix: install it (e.g. `pyenv install 3.10` or `apt-get install python3.10-venv`),
  or point at one: `make setup PYTHON=/path/to/python3.10`.
MSG
  return 1
}

if [ -x "$venv/bin/python" ] && ! is_py310 "$venv/bin/python"; then
  echo "Existing $venv is not Python 3.10; recreating it." >&2
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  python="$(find_python)"
  echo "Creating $venv with $python ($("$python" --version 2>&1))"
  "$python" -m venv "$venv"
fi

echo "Installing the pinned stack into $venv (first time: ~3-4 min, ~4 GB; pip's cache makes re-runs fast)"
"$venv/bin/python" -m pip install --quiet -c constraints.txt pip setuptools wheel
"$venv/bin/python" -m pip install --quiet --no-build-isolation -c constraints.txt -e ".[dev,notebook,docs]"
"$venv/bin/python" -m pip check
echo "Setup complete: $venv"
