#!/usr/bin/env bash
# Run a command on Debian 13 (glibc 2.41, Python 3.13) from a machine with an older system: the
# newer stack (TFX 1.21) needs glibc >= 2.39, so CI on Debian 12 tests it in a Debian 13 root.
#
#   bash scripts/debian13_root.sh ROOT 'make test'
#
# Builds ROOT once with mmdebstrap from Debian's archive (the packages a Debian 13 user has after
# `apt-get install` of what the README asks for, plus what the tests use), copies the machine's CA
# bundle and /etc/hosts in, copies this project's working tree (the files git tracks or would track: no .venv, no
# output) to ROOT/project, keeping the .venv a previous call made there, bind-mounts /proc, /sys and
# /dev, runs the command in ROOT/project as root with a clean environment, and unmounts whatever
# happens. Needs root (or sudo).
set -euo pipefail
root="${1:?usage: debian13_root.sh ROOT COMMAND}"
command="${2:?usage: debian13_root.sh ROOT COMMAND}"
project="$(cd "$(dirname "$0")/.." && pwd)"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python3-venv/-dev and g++: setup (pyfarmhash compiles); chromium: the browser tests; e2fsprogs
# (chattr), procps, iproute2, sqlite3, git, make: what the tests and the Makefile call.
PACKAGES=python3,python3-venv,python3-dev,g++,make,git,ca-certificates,chromium,procps,iproute2,sqlite3,e2fsprogs

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

if [ ! -x "$root/usr/bin/python3" ]; then
  command -v mmdebstrap >/dev/null || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq mmdebstrap; }
  echo "Building a Debian 13 root in $root (mmdebstrap, ~1-2 min)"
  $SUDO rm -rf "$root"
  $SUDO mmdebstrap --quiet --variant=minbase --include="$PACKAGES" trixie "$root" "$MIRROR"
fi
# The machine's CA bundle: where a proxy re-signs TLS, pip inside needs the same roots as outside.
for bundle in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
  [ -f "$bundle" ] && { $SUDO cp "$bundle" "$root/etc/ssl/certs/ca-certificates.crt"; break; }
done
$SUDO cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# The machine's names: in a chroot gethostname() is still the machine's, which only its /etc/hosts resolves
# (Beam tells a worker pool's workers to connect back by that name; without it they retry forever).
$SUDO cp /etc/hosts "$root/etc/hosts" 2>/dev/null || true

mounted=()
unmount_all() {
  local index
  for ((index=${#mounted[@]}-1; index>=0; index--)); do
    $SUDO umount -R "${mounted[$index]}" 2>/dev/null || $SUDO umount -lR "${mounted[$index]}" 2>/dev/null || true
  done
}
trap unmount_all EXIT
for dir in proc sys dev; do
  $SUDO mount --rbind "/$dir" "$root/$dir" && $SUDO mount --make-rslave "$root/$dir"
  mounted+=("$root/$dir")
done

# The working tree as a new clone would have it, plus uncommitted work; the root's own .venv stays.
copy="$root/project"
$SUDO mkdir -p "$copy"
$SUDO find "$copy" -mindepth 1 -maxdepth 1 ! -name .venv -exec rm -rf {} +
git -C "$project" ls-files -z --cached --others --exclude-standard \
  | (cd "$project" && tar --null --files-from=- --ignore-failed-read -cf - ) | $SUDO tar -xf - -C "$copy"

# A clean environment: nothing of the host's Python, pip or venv leaks in.
environment=(HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 TERM=dumb
             SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt
             REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1
             PIP_DEFAULT_TIMEOUT=180)
[ -n "${PIP_NO_CACHE_DIR:-}" ] && environment+=(PIP_NO_CACHE_DIR="$PIP_NO_CACHE_DIR")
$SUDO chroot "$root" /usr/bin/env -i "${environment[@]}" bash -c "cd /project && $command"
