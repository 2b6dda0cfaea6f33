#!/usr/bin/env bash
# Make sure Tesseract can read text in images (docs/ocr.md): the `tesseract` command with its
# English and orientation/script (OSD) data. Missing: install Debian's tesseract-ocr,
# tesseract-ocr-eng and tesseract-ocr-osd with apt-get, non-interactively and quietly (as root,
# or through sudo), with fonts-dejavu-core (the fonts the OCR tests render their text in).
# `--required` (make test): fail when it cannot be installed; otherwise (make install) say so
# and carry on: OCR jobs then fail with ocr_unavailable and images stay searchable by sight.
set -uo pipefail
required=false
[ "${1:-}" = "--required" ] && required=true
packages=(tesseract-ocr tesseract-ocr-eng tesseract-ocr-osd fonts-dejavu-core)

have_all() {
  command -v tesseract >/dev/null 2>&1 || return 1
  local langs
  langs="$(tesseract --list-langs 2>/dev/null)"
  grep -qx eng <<<"$langs" && grep -qx osd <<<"$langs" || return 1
  command -v fc-list >/dev/null 2>&1 && fc-list 2>/dev/null | grep -q DejaVu
}
if have_all; then exit 0; fi

give_up() {
  echo "tesseract: $1" >&2
  echo "tesseract: OCR needs it: install ${packages[*]}" >&2
  if $required; then exit 1; fi
  exit 0
}

if ! command -v apt-get >/dev/null 2>&1; then give_up "not found, and apt-get is not available here"; fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  give_up "not found, and installing it needs root (run: sudo apt-get install ${packages[*]})"
fi
echo "tesseract: not found (or without its eng/osd data); installing ${packages[*]} with apt-get"
apt() { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@"; }
# A fresh image may have no package lists yet: update once if the first attempt fails.
if ! apt install -y -qq "${packages[@]}" >/dev/null; then
  apt update -qq >/dev/null && apt install -y -qq "${packages[@]}" >/dev/null \
    || give_up "apt-get could not install ${packages[*]}"
fi
have_all || give_up "the packages installed no usable tesseract with eng and osd data"
echo "tesseract: installed $(tesseract --version 2>/dev/null | head -n 1)"
