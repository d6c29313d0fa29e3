#!/usr/bin/env bash
# Create the project virtualenv on the stack this system can run, and install its pinned packages.
#
# Two stacks, one code base (docs/development.md, "Two stacks"):
#   tfx-1.21  TFX 1.21 / TensorFlow 2.21 on Python 3.11-3.13. Its TFDV wheels are manylinux_2_39, so
#             it needs glibc >= 2.39 (Debian 13, Ubuntu 24.04 and newer).
#   tfx-1.16  TFX 1.16 / TensorFlow 2.16 on Python 3.10: every older glibc (Debian 12, Ubuntu 22.04).
# Chosen from the system: glibc >= 2.39 and a Python 3.11-3.13 (the system's own python3 first) give
# tfx-1.21; else a Python 3.10 gives tfx-1.16. PYTHON=... picks the interpreter, STACK=... the stack.
# An existing venv keeps its stack unless one of those is given. Nothing half-made is left behind.
# `setup_venv.sh --dry-run [VENV]` prints the choice (the "Stack:" line) and changes nothing.
set -euo pipefail
dry_run=""
if [ "${1:-}" = --dry-run ]; then dry_run=1; shift; fi
venv="${1:-.venv}"
cd "$(dirname "$0")/.."

NEWER=tfx-1.21
OLDER=tfx-1.16
NEWER_MIN_GLIBC=2.39

say() { echo "$*" >&2; }
fail() { say ""; say "$1"; exit 1; }

py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]; }
glibc_version() { getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}'; }
OS_RELEASE="${OS_RELEASE:-/etc/os-release}"
system_name() { (. "$OS_RELEASE" 2>/dev/null && echo "${PRETTY_NAME:-$ID}") || uname -sr; }
os_id() { (. "$OS_RELEASE" 2>/dev/null && echo "${ID:-} ${VERSION_ID:-}") || true; }

# Python versions a stack's wheels exist for.
stack_takes() {  # stack version
  case "$1:$2" in
    "$NEWER":3.1[1-3]) return 0 ;;
    "$OLDER":3.10) return 0 ;;
  esac
  return 1
}

# The stack this system and interpreter can run ("" when none).
stack_for() {  # python
  local version glibc
  version="$(py_version "$1")" || return 0
  glibc="$(glibc_version)"
  if [ -n "$glibc" ] && version_ge "$glibc" "$NEWER_MIN_GLIBC" && stack_takes "$NEWER" "$version"; then
    echo "$NEWER"
  elif stack_takes "$OLDER" "$version"; then
    echo "$OLDER"
  fi
}

# The first interpreter that runs `stack` on this system ("" when none).
first_for() {  # stack
  local candidate glibc
  glibc="$(glibc_version)"
  if [ "$1" = "$NEWER" ] && { [ -z "$glibc" ] || ! version_ge "$glibc" "$NEWER_MIN_GLIBC"; }; then
    return 0
  fi
  while read -r candidate; do
    [ -n "$candidate" ] && stack_takes "$1" "$(py_version "$candidate")" && { echo "$candidate"; return 0; }
  done < <(candidates)
  return 0
}

# Interpreters to try, the system's own python3 first, then versioned names and pyenv's; only those
# that start (a pyenv shim of a version that is not selected does not).
candidates() {
  local name path
  {
    for name in python3 python3.13 python3.12 python3.11 python3.10; do
      command -v "$name" 2>/dev/null || true
    done
    ls -d "$HOME"/.pyenv/versions/3.1[0-3]*/bin/python3 2>/dev/null | sort -rV || true
  } | while read -r path; do
    py_version "$path" >/dev/null && echo "$path"
  done
}

# What to install on this system for a stack to be possible: one paragraph.
nothing_fits() {
  local glibc arch os found=""
  glibc="$(glibc_version)"; arch="$(uname -m)"; os="$(os_id)"
  while read -r candidate; do
    [ -n "$candidate" ] && found="$found $candidate ($(py_version "$candidate" || true))"
  done < <(candidates)
  local advice
  if [ -n "$glibc" ] && version_ge "$glibc" "$NEWER_MIN_GLIBC"; then
    case "$os" in
      debian*|ubuntu*) advice="install Python 3 with venv: \`sudo apt-get install python3 python3-venv python3-dev g++\`" ;;
      *) advice="install Python 3.11, 3.12 or 3.13 with its venv module from your system's packages" ;;
    esac
    advice="$advice, or point at one: \`make setup PYTHON=/path/to/python3.13\`."
  else
    case "$os" in
      "ubuntu 22.04") advice="install Python 3.10 with venv: \`sudo apt-get install python3.10-venv python3.10-dev g++\`" ;;
      *) advice="this system's packages have no Python 3.10: build one with pyenv (\`pyenv install 3.10\`, needs a C compiler and the headers pyenv's wiki lists) or use a newer system (glibc >= $NEWER_MIN_GLIBC, e.g. Debian 13 or Ubuntu 24.04), where the system's Python runs TFX 1.21" ;;
    esac
    advice="$advice; then \`make setup\` again, or \`make setup PYTHON=/path/to/python3.10\`."
  fi
  fail "error: no Python this project can run on $(system_name) ($arch, glibc ${glibc:-unknown}).
  TFX 1.21 needs glibc >= $NEWER_MIN_GLIBC and Python 3.11-3.13; on an older glibc, TFX 1.16 needs Python 3.10.
  Found:${found:- no python3}.
  Fix: $advice"
}

check_platform() {
  local arch os
  arch="$(uname -m)"; os="$(uname -s)"
  if [ "$os" != Linux ] || [ "$arch" != x86_64 ]; then
    fail "error: $os on $arch is not supported: TFX's data-validation wheels (tensorflow-data-validation) exist only
  for Linux on x86_64 (64-bit), for both TFX 1.16 and 1.21, and have no source build.
  Fix: run on a 64-bit x86 Linux machine, or in Kubeflow Pipelines with the project's image (kubeflow/README.md)."
  fi
}

# pyfarmhash (a TFX dependency) ships no wheels: it is compiled at install time.
check_build_tools() {  # python
  local include
  include="$("$1" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  local missing=""
  command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || missing="a C++ compiler (g++)"
  [ -f "$include/Python.h" ] || missing="${missing:+$missing and }Python's headers ($include/Python.h)"
  [ -z "$missing" ] && return 0
  local pkgs="g++ python$(py_version "$1")-dev"
  [ "$1" = "$(command -v python3 2>/dev/null)" ] && pkgs="g++ python3-dev"
  fail "error: $missing missing: pyfarmhash, a TFX dependency with no prebuilt wheel, is compiled during setup.
  Fix: install them (on Debian/Ubuntu: \`sudo apt-get install $pkgs\`), then \`make setup\` again."
}

check_venv_module() {  # python
  "$1" -c 'import venv, ensurepip' 2>/dev/null && return 0
  local version; version="$(py_version "$1")"
  fail "error: $1 (Python $version) has no venv module with pip (ensurepip), which setup needs to create $venv.
  Fix: on Debian/Ubuntu \`sudo apt-get install python$version-venv\` (or python3-venv for the system's python3), then \`make setup\` again."
}

# ---------------------------------------------------------------- choose the interpreter and the stack
check_platform
existing_stack=""
if [ -f "$venv/.stack" ]; then
  existing_stack="$(cat "$venv/.stack")"
elif [ "$(py_version "$venv/bin/python" 2>/dev/null)" = 3.10 ]; then
  existing_stack="$OLDER"          # made before there were two stacks: always TFX 1.16
fi

if [ -n "${STACK:-}" ] && [ "$STACK" != "$NEWER" ] && [ "$STACK" != "$OLDER" ]; then
  fail "error: STACK=$STACK is not a stack of this project; the stacks are $NEWER and $OLDER (constraints/<stack>.txt)."
fi

python=""
if [ -n "${PYTHON:-}" ]; then
  version="$(py_version "$PYTHON")" || fail "error: PYTHON=$PYTHON is not a working Python interpreter."
  stack="${STACK:-$(stack_for "$PYTHON")}"
  if [ -z "$stack" ] || ! stack_takes "$stack" "$version"; then
    why="no stack of this project runs on this system (glibc $(glibc_version)) with it"
    [ -n "${STACK:-}" ] && why="the stack $STACK does not take"
    fail "error: PYTHON=$PYTHON is Python $version, which $why.
  TFX 1.21 ($NEWER) takes Python 3.11-3.13 on glibc >= $NEWER_MIN_GLIBC; TFX 1.16 ($OLDER) takes Python 3.10.
  Fix: \`make setup PYTHON=/path/to/python3.x\` with one of those, or \`make setup\` to let it choose."
  fi
  python="$PYTHON"
else
  if [ -n "${STACK:-}" ]; then
    order="$STACK"
  elif [ -n "$existing_stack" ] && [ -x "$venv/bin/python" ]; then
    order="$existing_stack"        # a working venv keeps its stack
  else
    order="$NEWER $OLDER"
  fi
  for wanted in $order; do
    python="$(first_for "$wanted")"
    if [ -n "$python" ]; then stack="$wanted"; break; fi
  done
  if [ -z "$python" ] && [ -n "${STACK:-}" ]; then
    needs="Python 3.10"
    [ "$STACK" = "$NEWER" ] && needs="glibc >= $NEWER_MIN_GLIBC (this system has $(glibc_version)) and Python 3.11-3.13"
    fail "error: STACK=$STACK cannot be set up on $(system_name): it needs $needs.
  Fix: leave STACK unset to let setup choose the stack this system runs, or \`make setup STACK=... PYTHON=/path/to/python\`."
  fi
  [ -n "$python" ] || nothing_fits
fi

check_venv_module "$python"
check_build_tools "$python"
constraints="constraints/$stack.txt"
if [ -n "$dry_run" ]; then
  echo "Stack: $stack (TFX ${stack#tfx-}) on Python $(py_version "$python") ($python; glibc $(glibc_version)), pinned in $constraints"
  exit 0
fi

# A venv of another stack or interpreter is replaced, not mixed.
if [ -x "$venv/bin/python" ]; then
  if [ "$existing_stack" != "$stack" ] || [ "$(py_version "$venv/bin/python")" != "$(py_version "$python")" ]; then
    say "Replacing $venv (${existing_stack:-unknown stack}, Python $(py_version "$venv/bin/python")) with $stack on Python $(py_version "$python")."
    rm -rf "$venv"
  fi
elif [ -e "$venv" ]; then
  rm -rf "$venv"                   # a leftover without an interpreter
fi

created=""
cleanup_on_failure() {
  local code=$?
  [ "$code" = 0 ] && return
  if [ -n "$created" ]; then
    rm -rf "$venv"
    say "Setup failed (exit $code): removed the half-made $venv; fix the error above and run \`make setup\` again."
  else
    rm -f "$venv"/.installed-*
    say "Setup failed (exit $code): $venv is marked not installed, so every make target retries setup."
  fi
}
trap cleanup_on_failure EXIT

echo "Stack: $stack (TFX ${stack#tfx-}) on Python $(py_version "$python") ($python; glibc $(glibc_version)), pinned in $constraints"
if [ ! -x "$venv/bin/python" ]; then
  created=1                        # from here, a failure removes what venv made
  "$python" -m venv "$venv"
fi
echo "$stack" > "$venv/.stack"

echo "Installing the pinned stack into $venv (first time: ~4-10 min, ~4 GB; pip's cache makes re-runs fast)"
"$venv/bin/python" -m pip install --quiet -c "$constraints" pip setuptools wheel
"$venv/bin/python" -m pip install --quiet --no-build-isolation -c "$constraints" -e ".[${stack//./-},dev,notebook,docs]"
"$venv/bin/python" -m pip check
if ! "$venv/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("tensorflow_io") is None)'; then
  # No tensorflow-io for this stack's TensorFlow: the project's s3:// filesystem (stackenv/s3_filesystem)
  "$venv/bin/python" -m stackenv.s3_filesystem 2>"$venv/s3-filesystem-build.log" \
    || { grep -v "^WARNING: All log\|^[IWE]0000" "$venv/s3-filesystem-build.log" >&2; exit 1; }
fi
echo "Setup complete: $venv ($stack)"
